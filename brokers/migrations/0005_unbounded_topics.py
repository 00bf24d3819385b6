"""A topic's max size becomes optional (issue 17): it now bounds the backlog of the topic's
consumer groups for every protocol's producers, so only topics that are queues keep one.
Queues made over VibeMQ keep theirs, as do topics whose bound someone changed from the old
default; MQs made by zbus (10 million, BlockPublisher: "unbounded" in zbus 5) and every
other topic still at the old default 10,000 become unbounded."""

import django.core.validators
from django.db import migrations, models


OLD_DEFAULT = 10_000
ZBUS_BOUND = 10_000_000


def unbound(apps, schema_editor):
    Topic = apps.get_model("brokers", "Topic")
    for topic in Topic.objects.select_related("team"):
        made_by_vibemq = (topic.creator or "").startswith("vibemq:")
        made_by_zbus = topic.team.name == "zbus" or topic.description == "created over zbus"
        if (made_by_zbus and topic.max_queue_size == ZBUS_BOUND) or (
            not made_by_vibemq and topic.max_queue_size == OLD_DEFAULT
        ):
            topic.max_queue_size = None
            topic.save(update_fields=["max_queue_size"])


class Migration(migrations.Migration):

    dependencies = [
        ('brokers', '0004_open_existing_topics'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='topic',
            name='topic_max_queue_size_range',
        ),
        migrations.AlterField(
            model_name='topic',
            name='max_queue_size',
            field=models.PositiveIntegerField(blank=True, help_text='Most unsettled messages per partition, counted on the slowest consumer group whatever protocol produces or consumes (empty: no bound; retention applies).', null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(10000000)]),
        ),
        migrations.AddConstraint(
            model_name='topic',
            constraint=models.CheckConstraint(condition=models.Q(('max_queue_size__isnull', True), models.Q(('max_queue_size__gte', 1), ('max_queue_size__lte', 10000000)), _connector='OR'), name='topic_max_queue_size_range'),
        ),
        migrations.RunPython(unbound, migrations.RunPython.noop),
    ]
