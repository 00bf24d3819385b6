"""Routes of the REST API under /api/v1/."""

from rest_framework.routers import DefaultRouter

from mqcloud.api import views

router = DefaultRouter()
router.register("teams", views.TeamViewSet, basename="team")
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("brokers", views.BrokerViewSet, basename="broker")
router.register("topics", views.TopicViewSet, basename="topic")
router.register("apps", views.AppViewSet, basename="app")
router.register("producer-policies", views.ProducerPolicyViewSet, basename="producerpolicy")
router.register("consumer-policies", views.ConsumerPolicyViewSet, basename="consumerpolicy")

urlpatterns = router.urls
