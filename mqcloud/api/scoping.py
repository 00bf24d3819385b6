"""Who sees and changes what: platform admins everything, others their teams' objects."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework import permissions

from brokers.models import Team, TeamMembership


def is_platform_admin(user: object) -> bool:
    """Staff and superusers administer the whole platform."""
    return bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))


def user_teams(user: object) -> QuerySet[Team]:
    """The teams ``user`` may act for (every team for a platform admin)."""
    if is_platform_admin(user):
        return Team.objects.all()
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user)


def admin_teams(user: object) -> QuerySet[Team]:
    """Teams ``user`` administers (every team for a platform admin)."""
    if is_platform_admin(user):
        return Team.objects.all()
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user, memberships__role=TeamMembership.Role.ADMIN)


class TeamAdminWrites(permissions.BasePermission):
    """Members read their team's objects; changing one takes a team admin (as in the console)."""

    message = "Only an admin of the team may change its apps and tokens."

    def has_object_permission(self, request, view, obj) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return True
        return admin_teams(request.user).filter(pk=obj.team_id).exists()


class AdminWritesOnly(permissions.BasePermission):
    """Anyone signed in may read; only platform admins may change (clusters, brokers)."""

    message = "Only platform admins may change clusters and brokers."

    def has_permission(self, request, view) -> bool:
        return request.method in permissions.SAFE_METHODS or is_platform_admin(request.user)


class PlatformAdminsOnly(permissions.BasePermission):
    """Only platform admins, to read as to change (capacity reports, alert channels)."""

    message = "Only platform admins may use this."

    def has_permission(self, request, view) -> bool:
        return is_platform_admin(request.user)
