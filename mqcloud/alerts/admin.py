"""Django admin for the alert history."""

from django.contrib import admin

from mqcloud.alerts.models import AlertEvent


@admin.register(AlertEvent)
class AlertEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "kind", "target", "team", "emailed", "webhook_status"]
    list_filter = ["kind", "team", "emailed"]
    search_fields = ["target", "message"]
