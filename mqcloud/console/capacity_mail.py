"""The daily capacity report by e-mail: once the previous UTC day's report is made, its
summary goes to every platform admin with an address (``CAPACITY_REPORT_MAIL``, on by
default) — each store node's memory, growth and days until full, each cluster's size and
the day's traffic, the topics storing the most — with a link to ``/capacity/`` when
``CONSOLE_PUBLIC_URL`` is set.

A report is e-mailed once (:attr:`CapacityReport.emailed_at`). When mail is down the
hourly beat task tries again, through the same mail channel as alerts (paused for every
worker after a failure, :mod:`mqcloud.alerts.channels`), for as long as the report is the
latest day's; partial reports made on demand are never e-mailed.
"""

from __future__ import annotations

from datetime import date, timedelta

from django.conf import settings
from django.utils import timezone

from mqcloud.alerts.delivery import mail, platform_admin_emails
from mqcloud.alerts.lag_bytes import human_bytes
from mqcloud.console.capacity import GROWTH_DAYS, NodeOutlook, outlook
from mqcloud.console.models import CapacityReport


def _node_line(node: NodeOutlook) -> str:
    used = human_bytes(node.used_bytes)
    if node.max_bytes:
        used += f" of {human_bytes(node.max_bytes)} ({node.used_percent}%)"
    else:
        used += " (no memory limit)"
    line = f"  {node.name}: {used}, {node.keys:,} keys"
    if node.growth_per_day is not None:
        sign = "+" if node.growth_per_day >= 0 else "-"
        line += f", {sign}{human_bytes(abs(node.growth_per_day))} a day"
    if node.days_left is not None:
        line += f", full in {node.days_left} days at that pace"
    return line


def report_text(report: CapacityReport, nodes: list[NodeOutlook]) -> tuple[str, str]:
    """(subject, body) of ``report``'s e-mail; ``nodes``: its store nodes' outlook."""
    day = report.day.isoformat()
    lines = [f"Capacity report for {day} (UTC)", "", "Store"]
    lines += [_node_line(n) for n in nodes] or ["  (no store node answered)"]
    lines += ["", "Clusters"]
    for row in report.clusters:
        lines.append(
            f"  {row['cluster']}: {row['topics']:,} topics, {row['partitions']:,} partitions, "
            f"{row['stored_messages']:,} messages stored; that day produced "
            f"{row['produced_messages']:,} messages, {human_bytes(row['produced_bytes'])}"
        )
    if not report.clusters:
        lines.append("  (no clusters)")
    if report.top_topics:
        lines += ["", "Topics storing the most"]
        lines += [f"  {t['code']} ({t['cluster']}): {t['stored']:,}" for t in report.top_topics]
    full_soon = [n for n in nodes if n.days_left is not None and n.days_left < 14]
    if full_soon:
        names = ", ".join(n.name for n in full_soon)
        lines += ["", f"Within 14 days at this pace, full: {names}."]
    base = settings.CONSOLE_PUBLIC_URL.rstrip("/")
    if base:
        lines += ["", f"{base}/capacity/"]
    subject = f"[mqcloud] capacity report {day}"
    if full_soon:
        subject += f": {len(full_soon)} store node(s) full within 14 days"
    return subject, "\n".join(lines) + "\n"


def mail_latest_report(today: date | None = None) -> bool:
    """E-mail the previous day's report unless it was e-mailed (or is partial, or mail
    of reports is off, or no admin has an address); whether it was sent now."""
    if not settings.CAPACITY_REPORT_MAIL:
        return False
    yesterday = (today or timezone.now().date()) - timedelta(days=1)
    report = CapacityReport.objects.filter(
        day=yesterday, partial=False, emailed_at__isnull=True
    ).first()
    if report is None:
        return False
    to = platform_admin_emails()
    if not to:
        return False
    history = list(CapacityReport.objects.filter(day__lte=report.day)[: GROWTH_DAYS + 1])
    subject, body = report_text(report, outlook(history))
    if not mail(subject, body, to):
        return False  # the next hour's run tries again
    report.emailed_at = timezone.now()
    report.save(update_fields=["emailed_at"])
    return True
