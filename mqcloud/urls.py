"""URL routes of the web process: console, REST API (with HTTP-MQ's console-token
endpoints, relayed by the HTTP-MQ service), schema, admin, health and metrics."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from mqcloud import health
from mqcloud.api import httpmq

urlpatterns = [
    path("", include("mqcloud.console.urls")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path(
        "password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("admin/", admin.site.urls),
    path("api/v1/", include("mqcloud.api.urls")),
    # HTTP-MQ's console-token endpoints; the HTTP-MQ service relays /mq/… here.
    path("api/v1/httpmq/config/<str:consumer>", httpmq.consumer_config, name="mq-config"),
    path("api/v1/httpmq/consumer/config", httpmq.update_consumer_config, name="mq-consumer-config"),
    path("api/v1/httpmq/unregister", httpmq.unregister, name="mq-unregister"),
    path(
        "api/v1/httpmq/clustering/queue/offset",
        httpmq.clustering_offsets,
        name="mq-clustering-offsets",
    ),
    path(
        "api/v1/httpmq/broadcast/queue/offset",
        httpmq.broadcast_offsets,
        name="mq-broadcast-offsets",
    ),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", health.metrics, name="metrics"),
]

handler500 = "mqcloud.outage.server_error"
