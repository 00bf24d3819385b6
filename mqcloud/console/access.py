"""Who sees what in the console: querysets scoped to the user's teams, and role checks.

Objects of another team are answered with 404 (their existence is not disclosed); actions
a role may not take are answered with 403.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from brokers.models import App, ConsumerPolicy, ProducerPolicy, Team, Topic
from mqcloud.api.scoping import admin_teams, is_platform_admin, user_teams

__all__ = [
    "admin_teams",
    "apps_for",
    "consumers_for",
    "get_consumer",
    "get_topic",
    "is_platform_admin",
    "producers_for",
    "require_platform_admin",
    "require_team_admin",
    "topics_for",
    "user_teams",
]


def topics_for(user: AbstractBaseUser) -> QuerySet[Topic]:
    topics = Topic.objects.select_related("cluster", "team")
    return topics if is_platform_admin(user) else topics.filter(team__in=user_teams(user))


def apps_for(user: AbstractBaseUser) -> QuerySet[App]:
    apps = App.objects.select_related("team")
    return apps if is_platform_admin(user) else apps.filter(team__in=user_teams(user))


def producers_for(user: AbstractBaseUser) -> QuerySet[ProducerPolicy]:
    """Producers of the user's apps, and producers on the user's topics."""
    rows = ProducerPolicy.objects.select_related("topic", "app", "app__team")
    if is_platform_admin(user):
        return rows
    teams = user_teams(user)
    return rows.filter(app__team__in=teams) | rows.filter(topic__team__in=teams)


def consumers_for(user: AbstractBaseUser) -> QuerySet[ConsumerPolicy]:
    """Consumers of the user's apps, and consumers of the user's topics."""
    rows = ConsumerPolicy.objects.select_related("topic", "app", "app__team")
    if is_platform_admin(user):
        return rows
    teams = user_teams(user)
    return rows.filter(app__team__in=teams) | rows.filter(topic__team__in=teams)


def get_topic(user: AbstractBaseUser, code: str) -> Topic:
    """A topic the user may see, or 404."""
    topic = topics_for(user).filter(code=code).first()
    if topic is None:
        raise Http404("No such topic.")
    return topic


def get_consumer(user: AbstractBaseUser, name: str) -> ConsumerPolicy:
    """A consumer the user may see (of their app or on their topic), or 404."""
    consumer = consumers_for(user).filter(name=name).first()
    if consumer is None:
        raise Http404("No such consumer.")
    return consumer


def require_team_admin(user: AbstractBaseUser, team: Team) -> None:
    """403 unless ``user`` administers ``team`` (or the platform)."""
    if not admin_teams(user).filter(pk=team.pk).exists():
        raise PermissionDenied("Only the team's admins (or platform admins) may do this.")


def require_platform_admin(user: AbstractBaseUser) -> None:
    if not is_platform_admin(user):
        raise PermissionDenied("Only platform admins may do this.")
