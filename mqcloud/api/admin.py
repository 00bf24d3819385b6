"""Django admin for API tokens: listed and revocable, never readable."""

from django.contrib import admin

from mqcloud.api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["user", "name", "hint", "created_at", "last_used_at"]
    search_fields = ["user__username", "name"]
    fields = ["user", "name", "hint", "created_at", "last_used_at"]
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:  # issued by `manage.py issueapitoken`
        return False
