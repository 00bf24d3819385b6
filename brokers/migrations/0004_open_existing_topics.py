"""Keep working what worked before the engine became the one gate (issue 16).

- MQs made by zbus ``create_mq`` and topics with a zbus access token were open to
  token-less zbus clients: they are opened (their team's anonymous app gets a producer and
  a consumer policy), so the 2015 clients go on as before.
- Queues made over VibeMQ were usable by any app: the app that made them (``creator``
  ``vibemq:<app>``) gets a producer and a consumer policy, as a queue made now does.

Every other topic made in the console or the API is closed to token-less clients.
"""

from django.db import migrations

PREFIX = "anonymous"
APP_CODE_MAX = 100
POLICY_NAME_MAX = 255


def _anonymous_app(App, team):
    app = App.objects.filter(team=team, is_anonymous=True).first()
    if app is not None:
        return app
    base = f"{PREFIX}.{team.name}"[:APP_CODE_MAX]
    code, n = base, 1
    while App.objects.filter(code=code).exists():
        n += 1
        code = base[: APP_CODE_MAX - len(str(n)) - 1] + f"-{n}"
    return App.objects.create(
        code=code,
        team=team,
        is_anonymous=True,
        description="What token-less clients act as on this team's open topics.",
    )


def _grant(Producer, Consumer, topic, app, name, start):
    mode = "broadcast" if topic.type == "broadcast" else "clustering"
    if not Producer.objects.filter(topic=topic, app=app).exists():
        if Producer.objects.filter(name=name).exists():
            name = f"{name[: POLICY_NAME_MAX - 8]}.{topic.pk}"
        Producer.objects.create(topic=topic, app=app, name=name)
    if not Consumer.objects.filter(topic=topic, app=app).exists():
        if Consumer.objects.filter(name=name).exists():
            name = f"{name[: POLICY_NAME_MAX - 8]}.{topic.pk}"
        Consumer.objects.create(topic=topic, app=app, name=name, start_position=start, mode=mode)


def forwards(apps, schema_editor):
    Topic = apps.get_model("brokers", "Topic")
    App = apps.get_model("brokers", "App")
    Producer = apps.get_model("brokers", "ProducerPolicy")
    Consumer = apps.get_model("brokers", "ConsumerPolicy")
    for topic in Topic.objects.select_related("team"):
        made_by_zbus = topic.team.name == "zbus" or topic.description == "created over zbus"
        creator = topic.creator or ""
        if made_by_zbus or topic.zbus_token_hash or creator == "vibemq:anonymous":
            app = _anonymous_app(App, topic.team)
            _grant(Producer, Consumer, topic, app, f"{PREFIX}.{topic.code}", "earliest")
        elif creator.startswith("vibemq:"):
            app = App.objects.filter(code=creator.removeprefix("vibemq:")).first()
            if app is not None:
                name = f"{app.code}.{topic.code}"[:POLICY_NAME_MAX]
                _grant(Producer, Consumer, topic, app, name, "earliest")


class Migration(migrations.Migration):
    dependencies = [("brokers", "0003_anonymous_apps")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
