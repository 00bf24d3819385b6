"""Teams and their members (console-features "Users, teams, roles"): every user sees its
teams and who is in them; a team's admins (and the platform admins) add an existing user
to it, change a member's role and remove members, each change in the audit trail.

A team keeps at least one admin: the last one can neither leave nor be made a member (a
team without one could only be managed by the platform admins). Becoming an admin
oneself is an application (kind ``become_admin``), not a change made here.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from brokers.models import Team, TeamMembership
from mqcloud.approvals.services import record
from mqcloud.console import access
from mqcloud.console.listing import ListSpec, paginate

Role = TeamMembership.Role


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_username(self) -> str:
        name = self.cleaned_data["username"].strip()
        if "\x00" in name:
            raise forms.ValidationError("Null characters are not allowed.")
        return name


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


def _team(request: HttpRequest, name: str) -> Team:
    """One of the user's teams (any team for a platform admin), or 404."""
    team = access.user_teams(request.user).filter(name=name).first()
    if team is None:
        raise Http404("No such team.")
    return team


def _manages(request: HttpRequest, team: Team) -> bool:
    return access.admin_teams(request.user).filter(pk=team.pk).exists()


TEAMS = ListSpec(
    sorts={"name": ["name"], "members": ["members_count"]},
    default_sort="name",
    search=("name", "description"),
    search_label="Search teams",
)
MEMBERS = ListSpec(
    sorts={"user": ["user__username"], "role": ["role"]},
    default_sort="-role",
    search=("user__username", "user__email"),
    search_label="Search members",
)


@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    """The user's teams (every team for a platform admin, paged), with their sizes and
    the user's role in each."""
    teams = access.user_teams(request.user).annotate(
        members_count=Count("memberships", distinct=True),
        admins_count=Count("memberships", filter=Q(memberships__role=Role.ADMIN)),
    )
    listing = paginate(request, teams, TEAMS)
    roles = dict(
        TeamMembership.objects.filter(
            user=request.user, team__in=[t.pk for t in listing.rows]
        ).values_list("team_id", "role")
    )
    rows = [{"team": t, "role": roles.get(t.pk, "")} for t in listing.rows]
    return render(request, "console/teams.html", {"rows": rows, "listing": listing})


@login_required
def team_detail(request: HttpRequest, name: str) -> HttpResponse:
    """A team's members (paged); the forms to change them for those who manage it."""
    team = _team(request, name)
    members = paginate(request, team.memberships.select_related("user"), MEMBERS)
    return render(
        request,
        "console/team_detail.html",
        {
            "team": team,
            "members": members,
            "manages": _manages(request, team),
            "add_form": AddMemberForm(),
            "roles": Role.choices,
        },
    )


MANAGERS_ONLY = "Only the team's admins change its members."


def _admins_left(team: Team, without: TeamMembership) -> int:
    return team.memberships.filter(role=Role.ADMIN).exclude(pk=without.pk).count()


@login_required
@require_POST
def member_add(request: HttpRequest, name: str) -> HttpResponse:
    """Add an existing user to the team with a role."""
    team = _team(request, name)
    refusal = _add(request, team)
    if refusal:
        messages.error(request, refusal)
    return redirect("console:team", name=team.name)


def _add(request: HttpRequest, team: Team) -> str:
    """Add the member the form names; why not ('' when added)."""
    if not _manages(request, team):
        return MANAGERS_ONLY
    form = AddMemberForm(request.POST)
    if not form.is_valid():
        return "; ".join(e for errs in form.errors.values() for e in errs)
    username, role = form.cleaned_data["username"], form.cleaned_data["role"]
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        return f"No active user {username!r}."
    try:
        with transaction.atomic():
            TeamMembership.objects.create(team=team, user=user, role=role)
    except IntegrityError:
        return f"{username} is a member of {team.name} already."
    record(
        request.user,
        "team-member-added",
        f"team:{team.name}",
        team=team,
        detail={"user": username, "role": role},
    )
    messages.success(request, f"{username} joined {team.name} as {Role(role).label}.")
    return ""


@login_required
@require_POST
def member_change(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    """Change a member's role, or (``remove``) take it out of the team."""
    team = _team(request, name)
    membership = team.memberships.select_related("user").filter(pk=pk).first()
    if membership is None:
        raise Http404("No such member.")
    remove = "remove" in request.POST
    form = RoleForm(request.POST)
    if not _manages(request, team):
        messages.error(request, MANAGERS_ONLY)
    elif not remove and not form.is_valid():
        return HttpResponseBadRequest("role must be member or admin")
    else:
        with transaction.atomic():
            list(team.memberships.select_for_update().filter(role=Role.ADMIN))  # two admins
            # demoting each other at once keep one of them
            refusal = _change(request, team, membership, None if remove else form)
        if refusal:
            messages.error(request, refusal)
    if not access.user_teams(request.user).filter(pk=team.pk).exists():
        return redirect("console:teams")  # left the team
    return redirect("console:team", name=team.name)


def _change(
    request: HttpRequest, team: Team, membership: TeamMembership, form: RoleForm | None
) -> str:
    """Remove ``membership`` (``form`` None) or give it the form's role, keeping the
    team's last admin; why not ('' when done or nothing to do)."""
    username = membership.user.get_username()
    if form is None:
        if membership.role == Role.ADMIN and _admins_left(team, membership) == 0:
            return f"{username} is the team's last admin."
        membership.delete()
        action, detail = "team-member-removed", {"user": username}
        done = f"{username} left {team.name}."
    else:
        role = form.cleaned_data["role"]
        if role == membership.role:
            messages.info(request, "Nothing changed.")
            return ""
        if role == Role.MEMBER and _admins_left(team, membership) == 0:
            return f"{username} is the team's last admin."
        membership.role = role
        membership.save(update_fields=["role"])
        action, detail = "team-member-role", {"user": username, "role": role}
        done = f"{username} is now {Role(role).label} of {team.name}."
    record(request.user, action, f"team:{team.name}", team=team, detail=detail)
    messages.success(request, done)
    return ""
