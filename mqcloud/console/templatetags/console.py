"""Console template helpers: the unread-notification count, millisecond times and
durations, roles, sortable list headers."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from mqcloud.approvals.models import Application, Notification, Status
from mqcloud.console import access, engine_calls
from mqcloud.console.listing import Listing

register = template.Library()


@register.simple_tag(takes_context=True)
def unread_notifications(context: template.Context) -> int:
    user = context["request"].user
    if not user.is_authenticated:
        return 0
    return Notification.objects.filter(user=user, read=False).count()


@register.simple_tag(takes_context=True)
def pending_applications(context: template.Context) -> int:
    """Pending applications an admin could decide (0 for everybody else)."""
    user = context["request"].user
    if not access.is_platform_admin(user):
        return 0
    return Application.objects.filter(status=Status.PENDING).count()


@register.filter
def ms_time(value: int | None) -> str:
    """Epoch milliseconds as a UTC time with milliseconds."""
    return engine_calls.fmt_ms(int(value or 0))


@register.filter
def is_platform_admin(user: object) -> bool:
    return access.is_platform_admin(user)


@register.filter
def duration_ms(value: int | None) -> str:
    """A duration in milliseconds in words: '45 s', '3 min 20 s', '2 h 5 min', '3 d 4 h'."""
    if value is None:
        return "—"
    seconds = int(value) // 1000
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@register.simple_tag
def sort_th(listing: Listing, key: str, label: str, css: str = "") -> str:
    """A table header that sorts ``listing`` by ``key`` (toggling the direction), with
    ``aria-sort`` on the sorted column."""
    state = listing.sort_state(key)
    arrow = {"ascending": " ▲", "descending": " ▼"}.get(state, "")
    return format_html(
        '<th{}{}><a href="{}" data-sort="{}">{}{}</a></th>',
        format_html(' class="{}"', css) if css else "",
        format_html(' aria-sort="{}"', state) if state else "",
        listing.sort_url(key),
        key,
        label,
        arrow,
    )


@register.simple_tag
def list_hx(listing: Listing) -> str:
    """htmx attributes that make the links inside an element (sort headers) swap only
    ``listing``'s container and push its URL; without JavaScript they are plain links."""
    return format_html(
        'hx-boost="true" hx-target="#{0}" hx-select="#{0}" hx-swap="outerHTML"', listing.id
    )


@register.simple_tag
def list_url(listing: Listing, **changes: object) -> str:
    """``listing``'s URL with some of its parameters changed (``sort="-lag"``)."""
    return listing.url(**changes)
