"""Seal the zbus tokens applications stored in clear text, and redact them from the audit
trail (mqcloud/approvals/secrets.py): a pending application keeps the token's hash, which
is all approving it needs; an audit detail keeps only whether a token was set."""

from django.db import migrations

from mqcloud.approvals.secrets import SEALED, TOKEN, redacted, seal


def _holds_token(value: object) -> bool:
    if isinstance(value, dict):
        return any(k in (TOKEN, SEALED) or _holds_token(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_token(v) for v in value)
    return False


def forwards(apps, schema_editor):
    Application = apps.get_model("approvals", "Application")
    AuditEvent = apps.get_model("approvals", "AuditEvent")
    for application in Application.objects.filter(payload__icontains=TOKEN).iterator():
        sealed = seal(application.payload)
        if sealed != application.payload:
            application.payload = sealed
            application.save(update_fields=["payload"])
    for event in AuditEvent.objects.filter(detail__icontains=TOKEN).iterator():
        if _holds_token(event.detail):
            event.detail = redacted(event.detail)
            event.save(update_fields=["detail"])


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0005_zbus_access_kinds"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
