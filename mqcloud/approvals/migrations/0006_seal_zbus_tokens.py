"""Seal the zbus tokens applications stored in clear text, and redact them from the audit
trail (mqcloud/approvals/secrets.py): a pending application keeps the token's hash, which
is all approving it needs; an audit detail keeps only whether a token was set."""

from django.db import migrations

from mqcloud.approvals.secrets import TOKEN, redacted, seal


def forwards(apps, schema_editor):
    Application = apps.get_model("approvals", "Application")
    AuditEvent = apps.get_model("approvals", "AuditEvent")
    for application in Application.objects.filter(payload__icontains=TOKEN).iterator():
        sealed = seal(application.payload)
        if sealed != application.payload:
            application.payload = sealed
            application.save(update_fields=["payload"])
    for event in AuditEvent.objects.filter(detail__icontains=TOKEN).iterator():
        shown = redacted(event.detail)
        if shown != event.detail:
            event.detail = shown
            event.save(update_fields=["detail"])


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0005_zbus_access_kinds"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
