"""Favorite topics (console-features "Favorites"): a user stars the topics it works with;
they head its dashboard and the topic list filters on them (``starred=starred``). A user
stars only topics it may see, at most :data:`~mqcloud.console.models.FAVORITES_MAX`; a
topic it can no longer see (it left the team) stays starred but is shown nowhere, and a
deleted topic's stars go with it. The REST API offers the same (``/api/v1/favorites/``).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from brokers.models import Topic
from mqcloud.console import access
from mqcloud.console.models import FAVORITES_MAX, FavoriteTopic
from mqcloud.console.user_input import console_path


class FavoritesFull(Exception):
    """The user starred :data:`FAVORITES_MAX` topics already."""


def with_starred(topics: QuerySet[Topic], user: AbstractBaseUser) -> QuerySet[Topic]:
    """``topics`` annotated with ``starred``: whether ``user`` starred each (one query)."""
    mine = FavoriteTopic.objects.filter(user_id=user.pk, topic=OuterRef("pk"))
    return topics.annotate(starred=Exists(mine))


def starred_topics(user: AbstractBaseUser) -> QuerySet[Topic]:
    """The topics ``user`` starred and may still see, by code."""
    return access.topics_for(user).filter(favorited_by__user_id=user.pk).order_by("code")


def star(user: AbstractBaseUser, topic: Topic) -> bool:
    """Star ``topic`` for ``user``: True if it was not starred yet. FavoritesFull past
    the limit."""
    if FavoriteTopic.objects.filter(user_id=user.pk, topic=topic).exists():
        return False
    if FavoriteTopic.objects.filter(user_id=user.pk).count() >= FAVORITES_MAX:
        raise FavoritesFull(f"at most {FAVORITES_MAX} topics can be starred: unstar one first")
    try:
        with transaction.atomic():
            FavoriteTopic.objects.create(user_id=user.pk, topic=topic)
    except IntegrityError:  # starred meanwhile by another request
        return False
    return True


def unstar(user: AbstractBaseUser, topic: Topic) -> bool:
    """Unstar ``topic``: True if it was starred."""
    deleted, _ = FavoriteTopic.objects.filter(user_id=user.pk, topic=topic).delete()
    return bool(deleted)


@login_required
@require_POST
def toggle(request: HttpRequest, code: str) -> HttpResponse:
    """Star or unstar a topic the user may see (``starred`` 1 or 0 in the form); htmx
    gets the button back, a plain form returns to ``next`` (a console path) or the topic."""
    topic = access.get_topic(request.user, code)
    wanted = request.POST.get("starred") == "1"
    error = ""
    if wanted:
        try:
            star(request.user, topic)
        except FavoritesFull as exc:
            error = str(exc)
    else:
        unstar(request.user, topic)
    starred = FavoriteTopic.objects.filter(user_id=request.user.pk, topic=topic).exists()
    if request.headers.get("HX-Request"):
        return render(
            request,
            "console/partials/star.html",
            {
                "topic": topic,
                "starred": starred,
                "star_error": error,
                "next": console_path(request.POST.get("next", "")),
            },
        )
    if error:
        messages.error(request, error.capitalize() + ".")
    target = console_path(request.POST.get("next", ""))
    return redirect(target) if target else redirect("console:topic", code=topic.code)
