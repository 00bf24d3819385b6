"""The approval settings page (platform admins): which kinds are approved automatically,
and the maintenance freeze. Every change is written to the audit trail."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from mqcloud.approvals.models import AUTO_APPROVABLE, ApprovalSettings, Kind
from mqcloud.approvals.services import record
from mqcloud.console import access


class ApprovalSettingsForm(forms.Form):
    auto_approve = forms.MultipleChoiceField(
        choices=AUTO_APPROVABLE,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Approved automatically",
        help_text="Applications of these kinds execute as soon as they are filed.",
    )
    frozen = forms.BooleanField(
        required=False,
        label="Freeze approvals (maintenance)",
        help_text="Nothing is approved, automatically or by hand; applications still queue.",
    )

    def clean_auto_approve(self) -> list[str]:
        chosen = set(self.cleaned_data["auto_approve"])
        return [k for k in Kind.values if k in chosen]  # a stable order for the audit trail


def _changes(before: ApprovalSettings, after: dict[str, Any]) -> dict[str, Any]:
    added = [k for k in after["auto_approve"] if k not in before.auto_approve]
    removed = [k for k in before.auto_approve if k not in after["auto_approve"]]
    changes: dict[str, Any] = {}
    if added:
        changes["auto_approve_added"] = added
    if removed:
        changes["auto_approve_removed"] = removed
    if after["frozen"] != before.frozen:
        changes["frozen"] = after["frozen"]
    return changes


@login_required
def approval_settings(request: HttpRequest) -> HttpResponse:
    """Show and change the approval settings; unchanged submissions record nothing."""
    access.require_platform_admin(request.user)
    current = ApprovalSettings.current()
    if request.method == "POST":
        form = ApprovalSettingsForm(request.POST)
        if form.is_valid():
            with transaction.atomic():
                current = ApprovalSettings.objects.select_for_update().get(pk=current.pk)
                changes = _changes(current, form.cleaned_data)
                if changes:
                    current.auto_approve = form.cleaned_data["auto_approve"]
                    current.frozen = form.cleaned_data["frozen"]
                    current.full_clean()
                    current.save()
                    record(
                        request.user,
                        "approval-settings",
                        "approval-settings",
                        detail={
                            **changes,
                            "auto_approve": current.auto_approve,
                            "frozen": current.frozen,
                        },
                    )
            messages.success(request, "Approval settings saved." if changes else "Nothing changed.")
            return redirect("console:approval-settings")
        status = 400
    else:
        form = ApprovalSettingsForm(
            initial={"auto_approve": current.auto_approve, "frozen": current.frozen}
        )
        status = 200
    return render(
        request,
        "console/approval_settings.html",
        {"form": form, "settings": current},
        status=status,
    )
