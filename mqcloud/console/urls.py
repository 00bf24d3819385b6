"""Console routes."""

from django.urls import path

from mqcloud.console import views

app_name = "console"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
]
