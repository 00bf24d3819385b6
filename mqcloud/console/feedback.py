"""Feedback (console-features "Favorites, notices, feedback"): any user tells the platform
admins something — a problem, a wish — from any page; every active platform admin gets a
notification, one of them answers, and the author is notified of the answer. Users see
their own feedback, platform admins everyone's. At most
:data:`~mqcloud.console.models.FEEDBACK_PER_HOUR` a user an hour. The REST API offers the
same (``/api/v1/feedback/``); both go through :func:`send` and :func:`answer`, which are
audited (``feedback-sent``, ``feedback-answered``).
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from mqcloud.alerts.delivery import platform_admins
from mqcloud.approvals.models import Notification
from mqcloud.approvals.services import record
from mqcloud.console import access
from mqcloud.console.listing import Filter, ListSpec, paginate
from mqcloud.console.models import (
    FEEDBACK_ANSWER_MAX,
    FEEDBACK_PER_HOUR,
    FEEDBACK_TEXT_MAX,
    Feedback,
)
from mqcloud.console.user_input import clean_message, console_path

NOTICE_EXCERPT = 200
"""How much of a text a notification quotes."""
PAGE_MAX = Feedback._meta.get_field("page").max_length
FEEDBACK = ListSpec(
    sorts={"created": ["created_at"], "author": ["author__username"], "state": ["state"]},
    default_sort="-created",
    search=("text", "answer", "author__username"),
    filters=(Filter("state", "State", lookup="state", choices=tuple(Feedback.State.choices)),),
    per_page=50,
    search_label="Search text, answer or author",
)


class TooMuchFeedback(Exception):
    """The user sent :data:`FEEDBACK_PER_HOUR` in the last hour."""


def visible_to(user: AbstractBaseUser) -> QuerySet[Feedback]:
    """The feedback ``user`` may read: its own, everyone's for platform admins."""
    rows = Feedback.objects.select_related("author", "answered_by")
    return rows if access.is_platform_admin(user) else rows.filter(author_id=user.pk)


def source_page(raw: object) -> str:
    """The console page a feedback was sent from, if it is one that fits, else ''."""
    page = console_path(raw)
    return page if len(page) <= PAGE_MAX else ""


def _excerpt(text: str) -> str:
    one_line = " ".join(text.split())
    if len(one_line) <= NOTICE_EXCERPT:
        return one_line
    return one_line[: NOTICE_EXCERPT - 1] + "…"


def send(user: AbstractBaseUser, text: object, page: object = "") -> Feedback:
    """File ``user``'s feedback and notify every active platform admin. ValidationError
    for a bad text, TooMuchFeedback past the hourly limit."""
    clean = clean_message(text, FEEDBACK_TEXT_MAX, "feedback")
    since = timezone.now() - timedelta(hours=1)
    if Feedback.objects.filter(author_id=user.pk, created_at__gte=since).count() >= (
        FEEDBACK_PER_HOUR
    ):
        raise TooMuchFeedback(
            f"You sent {FEEDBACK_PER_HOUR} messages of feedback in the last hour: "
            "please wait before sending more."
        )
    with transaction.atomic():
        item = Feedback.objects.create(author=user, text=clean, page=source_page(page))
        record(user, "feedback-sent", f"feedback:{item.pk}")
        notice = f"Feedback #{item.pk} from {user.get_username()}: {_excerpt(clean)}"
        Notification.objects.bulk_create(
            Notification(user=admin, message=notice[:500])
            for admin in platform_admins().exclude(pk=user.pk)
        )
    return item


def answer(admin: AbstractBaseUser, item: Feedback, text: object) -> Feedback:
    """A platform admin answers ``item`` (again: the answer is replaced); its author is
    notified. PermissionDenied for anyone else, ValidationError for a bad text."""
    access.require_platform_admin(admin)
    clean = clean_message(text, FEEDBACK_ANSWER_MAX, "answer")
    with transaction.atomic():
        item.answer, item.answered_by, item.answered_at = clean, admin, timezone.now()
        item.state = Feedback.State.ANSWERED
        item.save(update_fields=["answer", "answered_by", "answered_at", "state"])
        record(admin, "feedback-answered", f"feedback:{item.pk}")
        if item.author_id is not None and item.author_id != admin.pk:
            Notification.objects.create(
                user_id=item.author_id,
                message=f"Your feedback #{item.pk} was answered: {_excerpt(clean)}"[:500],
            )
    return item


class FeedbackForm(forms.Form):
    text = forms.CharField(
        label="Your feedback",
        widget=forms.Textarea(attrs={"rows": 4}),
        max_length=FEEDBACK_TEXT_MAX,
        help_text="A problem, a wish, a question: the platform admins read it and answer here.",
    )
    page = forms.CharField(required=False, widget=forms.HiddenInput, max_length=300)


class AnswerForm(forms.Form):
    answer = forms.CharField(
        label="Answer", widget=forms.Textarea(attrs={"rows": 3}), max_length=FEEDBACK_ANSWER_MAX
    )


@login_required
def feedback_list(request: HttpRequest) -> HttpResponse:
    """The user's feedback (everyone's for platform admins) and the form to send more;
    ``?from=`` names the page the user came from."""
    form = FeedbackForm(
        request.POST or None, initial={"page": source_page(request.GET.get("from"))}
    )
    status = 200
    if request.method == "POST" and form.is_valid():
        try:
            item = send(request.user, form.cleaned_data["text"], form.cleaned_data["page"])
        except ValidationError as exc:
            form.add_error("text", exc)
        except TooMuchFeedback as exc:
            form.add_error(None, str(exc))
            status = 429
        else:
            messages.success(
                request, f"Thank you: feedback #{item.pk} went to the platform admins."
            )
            return redirect("console:feedback")
    listing = paginate(request, visible_to(request.user), FEEDBACK)
    return render(
        request,
        "console/feedback.html",
        {
            "form": form,
            "listing": listing,
            "is_admin": access.is_platform_admin(request.user),
            "answer_max": FEEDBACK_ANSWER_MAX,
        },
        status=status if request.method == "POST" else 200,
    )


@login_required
@require_POST
def feedback_answer(request: HttpRequest, pk: int) -> HttpResponse:
    """A platform admin answers feedback ``pk``."""
    access.require_platform_admin(request.user)
    item = get_object_or_404(Feedback, pk=pk)
    form = AnswerForm(request.POST)
    if not form.is_valid():
        messages.error(
            request,
            f"Feedback #{item.pk}: write an answer of at most {FEEDBACK_ANSWER_MAX} characters.",
        )
    else:
        try:
            answer(request.user, item, form.cleaned_data["answer"])
        except ValidationError as exc:
            messages.error(request, f"Feedback #{item.pk}: {' '.join(exc.messages)}")
        else:
            messages.success(request, f"Feedback #{item.pk} answered; its author is notified.")
    return redirect(f"{reverse('console:feedback')}#feedback-{item.pk}")
