"""A platform admin's "switch to a user's view" (console-features "Becoming admin …
Admins can switch to a user's view"), read-only.

An admin starts it from the user list; from then on every page (and the API through the
session) is answered as that user would see it — their topics, consumers, apps, alerts,
applications, notices — by :class:`ViewAsMiddleware`, which puts the user in
``request.user`` and the admin in ``request.view_as.viewer``. Nothing can be changed meanwhile: a
POST, PUT, PATCH or DELETE other than leaving the view (or logging out) is refused with
403, so nothing is ever done in the user's name. Starting and leaving are in the audit
trail. The view ends when the admin leaves it, logs out, or stops being a platform admin.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.functional import SimpleLazyObject
from django.utils.html import escape
from django.views.decorators.http import require_POST

from mqcloud.approvals.services import record
from mqcloud.console import access

SESSION_KEY = "mqcloud_view_as"
"""The viewed user's id in the admin's session."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class ViewAs:
    """Whether this request is a platform admin's view as a user: worked out when first
    asked (a request that never looks at its user — a health check, a static file — costs
    no session or database read)."""

    def __init__(self, request: HttpRequest) -> None:
        self._request = request
        self._admin = request.user  # Django's lazy user
        self._viewed: AbstractBaseUser | None = None
        self._known = False

    @property
    def viewed(self) -> AbstractBaseUser | None:
        """The user the admin views as, or None (not viewing)."""
        if not self._known:
            self._known = True
            self._viewed = _viewed(self._request, self._admin)
        return self._viewed

    @property
    def viewer(self) -> AbstractBaseUser | None:
        """The admin viewing, or None (not viewing)."""
        return self._admin if self.viewed is not None else None

    def user(self) -> AbstractBaseUser:
        """Who the request acts as: the viewed user, else the logged-in one."""
        return self.viewed or self._admin


class ViewAsMiddleware:
    """Answers a viewing admin's requests as the viewed user, read-only (see the module
    docstring); after the authentication middleware. ``request.view_as`` is the
    request's :class:`ViewAs`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if settings.SESSION_COOKIE_NAME not in request.COOKIES or request.path == reverse(
            "logout"
        ):  # no session, so no view; logging out ends it
            return self.get_response(request)
        view = request.view_as = ViewAs(request)  # type: ignore[attr-defined]
        if request.method not in SAFE_METHODS and request.path != reverse("console:view-as-stop"):
            viewed = view.viewed
            if viewed is not None:
                return _refuse(request, viewed)
        request.user = SimpleLazyObject(view.user)
        return self.get_response(request)


def _viewed(request: HttpRequest, admin: AbstractBaseUser) -> AbstractBaseUser | None:
    """The user a platform admin views as, or None (a stale view is forgotten)."""
    session = request.session
    if SESSION_KEY not in session:
        return None
    pk = session.get(SESSION_KEY)
    viewed = None
    if admin.is_authenticated and access.is_platform_admin(admin) and isinstance(pk, int):
        viewed = get_user_model().objects.filter(pk=pk).first()
    if viewed is None or viewed.pk == admin.pk:
        del session[SESSION_KEY]
        return None
    return viewed


def _refuse(request: HttpRequest, viewed: AbstractBaseUser) -> HttpResponse:
    text = (
        f"You are viewing as {viewed}: nothing can be changed in this view. "
        "Leave it (the banner at the top) to act as yourself."
    )
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": text}, status=403)
    return HttpResponse(
        f"<!doctype html><title>Read-only view</title><p>{escape(text)}</p>"
        f'<p><a href="{reverse("console:dashboard")}">Back</a></p>',
        status=403,
    )


@login_required
@require_POST
def start(request: HttpRequest, pk: int) -> HttpResponse:
    """Start viewing the console as user ``pk`` (platform admins; not as oneself)."""
    access.require_platform_admin(request.user)
    viewed = get_object_or_404(get_user_model(), pk=pk)
    if viewed.pk == request.user.pk:
        raise PermissionDenied("That is your own view.")
    request.session[SESSION_KEY] = viewed.pk
    record(request.user, "view-as-started", f"user:{viewed.username}")
    messages.info(request, f"Viewing as {viewed.username}, read-only.")
    return redirect("console:dashboard")


@login_required
@require_POST
def stop(request: HttpRequest) -> HttpResponse:
    """Leave the view: back to the admin's own."""
    view = getattr(request, "view_as", None)
    viewed = view.viewed if view is not None else None
    request.session.pop(SESSION_KEY, None)
    if view is not None and viewed is not None:
        record(view.viewer, "view-as-ended", f"user:{viewed.username}")
    return redirect("console:users")
