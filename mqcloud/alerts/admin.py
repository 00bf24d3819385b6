"""Django admin for the alert history and the admins copied on every alert."""

from django.contrib import admin

from mqcloud.alerts.models import AlertCopy, AlertEvent


@admin.register(AlertEvent)
class AlertEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "kind", "target", "team", "emailed", "webhook_status"]
    list_filter = ["kind", "team", "emailed"]
    search_fields = ["target", "message"]


@admin.register(AlertCopy)
class AlertCopyAdmin(admin.ModelAdmin):
    list_display = ["user", "created_at"]
