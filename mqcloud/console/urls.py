"""Console routes: one module per page group."""

from django.urls import path

from mqcloud.console import (
    applications,
    approval_settings,
    appviews,
    clients,
    clusters,
    consumers,
    dashboard,
    lockouts,
    messages,
    notices,
    pipeline,
    teams,
    timers,
    tokens,
    topics,
    users,
    vibemq,
)

app_name = "console"

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("topics/", topics.topic_list, name="topics"),
    path("topics/<str:code>/", topics.topic_detail, name="topic"),
    path("topics/<str:code>/traffic.json", topics.topic_traffic, name="topic-traffic"),
    path("topics/<str:code>/messages/", messages.browse, name="messages"),
    path("topics/<str:code>/timers/", timers.timer_list, name="timers"),
    path("topics/<str:code>/timers/cancel/", timers.timer_cancel, name="timer-cancel"),
    path("consumers/", consumers.consumer_list, name="consumers"),
    path("consumers/<str:name>/", consumers.consumer_detail, name="consumer"),
    path("consumers/<str:name>/progress/", consumers.consumer_progress, name="consumer-progress"),
    path("consumers/<str:name>/lag.json", consumers.consumer_lag, name="consumer-lag"),
    path(
        "consumers/<str:name>/<str:which>/",
        consumers.retry_list,
        name="retries",
    ),
    path(
        "consumers/<str:name>/<str:which>/action/",
        consumers.retry_action,
        name="retry-action",
    ),
    path("clusters/", clusters.cluster_list, name="clusters"),
    path("clients/", clients.client_inventory, name="clients"),
    path(
        "clusters/<int:pk>/elect-preferred-leaders/",
        clusters.cluster_elect_preferred,
        name="cluster-elect-preferred",
    ),
    path("brokers/<int:broker_id>/", clusters.broker_detail, name="broker"),
    path("apps/", appviews.app_list, name="apps"),
    path("apps/new/", appviews.app_create, name="app-new"),
    path("apps/<str:code>/", appviews.app_detail, name="app"),
    path("apps/<str:code>/rotate/", appviews.app_rotate, name="app-rotate"),
    path("applications/", applications.application_list, name="applications"),
    path("applications/new/", applications.application_new, name="application-new"),
    path("applications/queue/", applications.application_queue, name="application-queue"),
    path(
        "applications/settings/",
        approval_settings.approval_settings,
        name="approval-settings",
    ),
    path("applications/<int:pk>/", applications.application_detail, name="application"),
    path(
        "applications/<int:pk>/export/",
        applications.application_export,
        name="application-export",
    ),
    path(
        "applications/<int:pk>/progress/",
        applications.application_progress,
        name="application-progress",
    ),
    path(
        "applications/<int:pk>/approve/",
        applications.application_approve,
        name="application-approve",
    ),
    path(
        "applications/<int:pk>/reject/", applications.application_reject, name="application-reject"
    ),
    path(
        "applications/<int:pk>/cancel/", applications.application_cancel, name="application-cancel"
    ),
    path("notifications/", notices.notifications, name="notifications"),
    path("notifications/read/", notices.notifications_read, name="notifications-read"),
    path("audit/", notices.audit, name="audit"),
    path("alerts/", notices.alerts, name="alerts"),
    path("alerts/copies/", notices.alert_copies, name="alert-copies"),
    path("alerts/sms/", notices.alert_sms, name="alert-sms"),
    path("pipeline/", pipeline.jobs, name="pipeline"),
    path("pipeline/trace/", pipeline.trace_new, name="trace"),
    path("pipeline/trace/<int:pk>/", pipeline.trace_result, name="trace-result"),
    path("vibemq/", vibemq.vibemq_live, name="vibemq"),
    path("teams/", teams.team_list, name="teams"),
    path("teams/<str:name>/", teams.team_detail, name="team"),
    path("teams/<str:name>/members/", teams.member_add, name="team-member-add"),
    path("teams/<str:name>/members/<int:pk>/", teams.member_change, name="team-member"),
    path("users/", users.user_list, name="users"),
    path("users/new/", users.user_add, name="user-add"),
    path("users/<int:pk>/", users.user_change, name="user"),
    path("signup/", users.signup, name="signup"),
    path("tokens/", tokens.token_list, name="tokens"),
    path("lockouts/", lockouts.lockout_list, name="lockouts"),
    path("lockouts/<int:pk>/unlock/", lockouts.lockout_unlock, name="lockout-unlock"),
    path("tokens/<int:pk>/revoke/", tokens.token_revoke, name="token-revoke"),
]
