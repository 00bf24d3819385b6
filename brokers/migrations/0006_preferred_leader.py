"""Each partition group remembers its preferred leader, and each broker when it came up
(issue 20 item 9): a broker back from a failure gets its groups back once it has been up
a while. Existing groups prefer their current leader; brokers up now count as up since now."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


def fill(apps, schema_editor):
    PartitionGroup = apps.get_model("brokers", "PartitionGroup")
    Broker = apps.get_model("brokers", "Broker")
    PartitionGroup.objects.filter(preferred_leader=None).update(preferred_leader=models.F("leader"))
    Broker.objects.filter(status="up").update(up_since=django.utils.timezone.now())


class Migration(migrations.Migration):
    dependencies = [
        ("brokers", "0005_unbounded_topics"),
    ]

    operations = [
        migrations.AddField(
            model_name="broker",
            name="up_since",
            field=models.DateTimeField(
                blank=True,
                help_text="When the broker last came up (unset while down): the preferred-leader rebalance gives a broker its groups back only after it has been up a while.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="partitiongroup",
            name="preferred_leader",
            field=models.ForeignKey(
                blank=True,
                help_text="The broker that should lead this group (the leader it was created with): the preferred-leader rebalance moves the group back to it once it is up and healthy.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="preferred_groups",
                to="brokers.broker",
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
