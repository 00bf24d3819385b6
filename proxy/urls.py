"""Routes of the HTTP-MQ endpoints that producers and consumers call with an app token."""

from django.urls import path

from proxy import views

urlpatterns = [
    path("produce", views.produce, name="mq-produce"),
    path("produce/batch", views.produce_batch, name="mq-produce-batch"),
    path("message", views.message, name="mq-message"),
    path("ack", views.ack, name="mq-ack"),
    path("unlock", views.unlock, name="mq-unlock"),
]
