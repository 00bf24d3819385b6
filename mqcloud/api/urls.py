"""Routes of the REST API under /api/v1/."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from mqcloud.api import (
    alert_channels,
    announcements,
    approvals,
    capacity,
    clients,
    favorites,
    feedback,
    operations,
    token_views,
    views,
)

router = DefaultRouter()
router.register("teams", views.TeamViewSet, basename="team")
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("brokers", views.BrokerViewSet, basename="broker")
router.register("topics", views.TopicViewSet, basename="topic")
router.register("apps", views.AppViewSet, basename="app")
router.register("producer-policies", views.ProducerPolicyViewSet, basename="producerpolicy")
router.register("consumer-policies", views.ConsumerPolicyViewSet, basename="consumerpolicy")

router.register("applications", approvals.ApplicationViewSet, basename="application")
router.register("audit-events", approvals.AuditEventViewSet, basename="auditevent")
router.register("notifications", approvals.NotificationViewSet, basename="notification")
router.register("consumers", operations.ConsumerOperationsViewSet, basename="consumer")
router.register("api-tokens", token_views.ApiTokenViewSet, basename="apitoken")
router.register("clients", clients.ClientInventoryViewSet, basename="client")
router.register("favorites", favorites.FavoriteViewSet, basename="favorite")
router.register("feedback", feedback.FeedbackViewSet, basename="feedback")
router.register("capacity-reports", capacity.CapacityReportViewSet, basename="capacityreport")
router.register("announcements", announcements.AnnouncementViewSet, basename="announcement")
router.register("alert-channels", alert_channels.AlertChannelViewSet, basename="alertchannel")

approval_settings = approvals.ApprovalSettingsView.as_view(
    {"get": "retrieve", "put": "update", "patch": "partial_update"}
)

urlpatterns = [
    path("approval-settings/", approval_settings, name="approval-settings"),
    *router.urls,
]
