"""Django admin for every catalog model."""

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect

from brokers.erasure import STORE_ERRORS, erase_group_data, erase_topic_data
from brokers.models import (
    App,
    AppToken,
    Broker,
    Cluster,
    ConsumerPolicy,
    PartitionGroup,
    ProducerPolicy,
    Team,
    TeamMembership,
    Topic,
)
from brokers.topology import create_partition_groups


class ErasesStoredData(admin.ModelAdmin):
    """A row whose delete erases what the message store kept for it (brokers.erasure),
    inside the deleting transaction. If the store does not answer, nothing is deleted and
    the page says so (it was an error page)."""

    def stored_data(self, obj: Any) -> tuple[Callable[..., int], tuple[object, ...]]:
        """The erase of ``obj``'s stored data, and its arguments."""
        raise NotImplementedError

    @transaction.atomic
    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        erase, args = self.stored_data(obj)
        super().delete_model(request, obj)
        erase(*args)

    @transaction.atomic
    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        erases = [self.stored_data(obj) for obj in queryset]
        super().delete_queryset(request, queryset)
        for erase, args in erases:
            erase(*args)

    def _unless_store_fails(self, request: HttpRequest, view: Callable[[], Any]) -> Any:
        try:
            return view()
        except STORE_ERRORS as exc:
            self.message_user(
                request,
                f"Nothing was deleted: the message store did not answer ({exc}).",
                messages.ERROR,
            )
            return HttpResponseRedirect(request.get_full_path())

    def delete_view(self, request: HttpRequest, object_id: str, extra_context=None) -> Any:
        view = super().delete_view
        return self._unless_store_fails(request, lambda: view(request, object_id, extra_context))

    def changelist_view(self, request: HttpRequest, extra_context=None) -> Any:
        view = super().changelist_view  # runs the bulk delete action
        return self._unless_store_fails(request, lambda: view(request, extra_context))


class TeamMembershipInline(admin.TabularInline):
    model = TeamMembership
    extra = 1


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "created_at"]
    search_fields = ["name"]
    inlines = [TeamMembershipInline]


@admin.register(TeamMembership)
class TeamMembershipAdmin(admin.ModelAdmin):
    list_display = ["team", "user", "role"]
    list_filter = ["team", "role"]
    search_fields = ["user__username", "team__name"]


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "created_at"]
    search_fields = ["name"]


@admin.register(Broker)
class BrokerAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "cluster",
        "host",
        "jmq4_port",
        "zbus_port",
        "vibemq_port",
        "data_center",
        "weight",
        "readable",
        "writable",
        "status",
        "last_heartbeat",
    ]
    list_filter = ["cluster", "status", "readable", "writable", "data_center"]
    search_fields = ["host"]


class PartitionGroupInline(admin.TabularInline):
    model = PartitionGroup
    extra = 0


@admin.register(Topic)
class TopicAdmin(ErasesStoredData):
    list_display = ["code", "cluster", "team", "type", "partitions", "created_at"]
    list_filter = ["cluster", "team", "type"]
    search_fields = ["code", "description"]
    inlines = [PartitionGroupInline]

    @transaction.atomic
    def save_model(self, request, obj, form, change) -> None:
        """A new topic gets its partition groups, leaders spread over writable brokers."""
        if not change and not obj.creator:
            obj.creator = request.user.username
        super().save_model(request, obj, form, change)
        if not change:
            create_partition_groups(obj)

    def get_inlines(self, request, obj):
        return self.inlines if obj is not None else []

    def stored_data(self, obj: Topic) -> tuple[Callable[..., int], tuple[object, ...]]:
        return erase_topic_data, (obj,)


@admin.register(PartitionGroup)
class PartitionGroupAdmin(admin.ModelAdmin):
    list_display = ["topic", "group_id", "leader", "partitions"]
    list_filter = ["leader"]
    search_fields = ["topic__code"]


class AppTokenInline(admin.TabularInline):
    model = AppToken
    extra = 0
    fields = ["hint", "created_at", "revoked_at"]
    readonly_fields = ["hint", "created_at"]
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:  # tokens are issued, not typed
        return False


@admin.register(App)
class AppAdmin(admin.ModelAdmin):
    list_display = ["code", "team", "is_admin", "is_anonymous", "created_at"]
    list_filter = ["team", "is_admin", "is_anonymous"]
    search_fields = ["code"]
    inlines = [AppTokenInline]
    actions = ["rotate_token"]

    def save_model(self, request, obj, form, change) -> None:
        """A new app gets a token, shown once in the confirmation message."""
        super().save_model(request, obj, form, change)
        if not change:
            token = obj.issue_token()
            messages.warning(request, f"Token of {obj.code} (shown once, store it now): {token}")

    @admin.action(description="Issue a new token (revokes the current ones)")
    def rotate_token(self, request, queryset) -> None:
        for app in queryset:
            if app.is_anonymous:
                messages.error(request, f"{app.code} is an anonymous app: it has no tokens.")
                continue
            token = app.issue_token()
            messages.warning(request, f"New token of {app.code} (shown once): {token}")


@admin.register(AppToken)
class AppTokenAdmin(admin.ModelAdmin):
    list_display = ["app", "hint", "created_at", "revoked_at"]
    readonly_fields = ["app", "hint", "created_at"]
    exclude = ["token_hash"]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(ProducerPolicy)
class ProducerPolicyAdmin(admin.ModelAdmin):
    list_display = ["name", "topic", "app", "http_enabled", "rate_limit", "archive"]
    list_filter = ["http_enabled", "archive"]
    search_fields = ["name", "topic__code", "app__code"]


@admin.register(ConsumerPolicy)
class ConsumerPolicyAdmin(ErasesStoredData):
    list_display = ["name", "topic", "app", "mode", "paused", "http_enabled", "rate_limit"]
    list_filter = ["mode", "paused", "http_enabled", "archive"]
    search_fields = ["name", "topic__code", "app__code"]

    def stored_data(self, obj: ConsumerPolicy) -> tuple[Callable[..., int], tuple[object, ...]]:
        return erase_group_data, (obj,)
