"""``manage.py issueapitoken <username> [--name N]``: issue a REST API token (shown once)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqcloud.api.models import ApiToken


class Command(BaseCommand):
    help = "Issue a REST API token for a user and print it (it is stored hashed)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label for the token.")

    def handle(self, *args: object, **options: object) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user named {options['username']!r}")
        self.stdout.write(ApiToken.issue(user, name=str(options["name"])))
