"""Django settings for mqcloud, read from the environment (twelve-factor, django-environ).

Every setting has a safe local default so ``make run`` and ``make test`` need no
configuration; production sets at least ``SECRET_KEY``, ``DATABASE_URL``, ``REDIS_URL``,
``ALLOWED_HOSTS`` and ``DEBUG=false``. README.md lists every variable.
"""

from datetime import timedelta
from pathlib import Path

import environ

from mqcloud.routine_logs import LOGGERS as ROUTINE_TASK_LOGGERS
from mqcloud.routine_logs import routine_tasks

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="mqcloud-local-development-key-not-for-production")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# No "daphne" app: it only replaces `runserver`, which nothing here uses (the web process
# is daphne's own command line), and importing it installs Twisted's reactor in every
# Django process — 0.4 s of each broker's start, which a restart after a crash waits for.
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "channels",
    "axes",
    "brokers",
    "mqcloud.console",
    "mqcloud.api",
    "mqcloud.approvals",
    "mqcloud.alerts",
    "pipeline",
    "proxy",  # manage.py runproxy
]

MIDDLEWARE = [
    # Outermost: API paths answer every error as JSON, never an HTML or debug page.
    "mqcloud.json_errors.JsonErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # LOGIN_HEADER: the user a trusted single-sign-on proxy names is logged in.
    "mqcloud.console.header_login.HeaderLoginMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # A platform admin viewing as a user: answered as that user, read-only.
    "mqcloud.console.view_as.ViewAsMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last: refuses logins while a username or an address is locked out (django-axes).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "mqcloud.urls"
ASGI_APPLICATION = "mqcloud.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "mqcloud.console.context_processors.httpmq",
                "mqcloud.console.context_processors.accounts",
                "mqcloud.console.context_processors.announcements",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url(
        "DATABASE_URL", default="postgres://mqcloud:mqcloud@127.0.0.1:5432/mqcloud"
    )
}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")

# Request bodies above this limit are refused before they are read into memory. HTTP-MQ is
# served by its own process (manage.py runproxy), with its own HTTPMQ_* limits.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("HTTP_MAX_BODY_BYTES", default=64 * 1024 * 1024)
# Where clients reach HTTP-MQ (shown in the console).
HTTPMQ_PUBLIC_URL = env.str(
    "HTTPMQ_PUBLIC_URL", default=f"http://127.0.0.1:{env.int('HTTPMQ_PORT', default=8081)}"
)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: a locked-out login never gets further
    "django.contrib.auth.backends.ModelBackend",
    # answers only HeaderLoginMiddleware (LOGIN_HEADER), never a password login
    "mqcloud.console.header_login.HeaderUserBackend",
]
# Login through an external identity provider: a single-sign-on proxy in front of the
# web process names the user in LOGIN_HEADER (mqcloud/console/header_login.py); believed
# only from LOGIN_HEADER_TRUSTED_PROXIES. Empty: local accounts only.
LOGIN_HEADER = env.str("LOGIN_HEADER", default="")
LOGIN_HEADER_TRUSTED_PROXIES = env.list(
    "LOGIN_HEADER_TRUSTED_PROXIES", default=["127.0.0.1", "::1"]
)
LOGIN_HEADER_EMAIL = env.str("LOGIN_HEADER_EMAIL", default="")
LOGIN_HEADER_CREATE_USERS = env.bool("LOGIN_HEADER_CREATE_USERS", default=True)
# Failed logins are throttled per username and per client address (django-axes, its
# state in PostgreSQL, shared by every web process): LOGIN_FAILURE_LIMIT failures lock
# that username, or that address, for LOGIN_LOCKOUT_MINUTES; the audit trail records each
# failure and lockout (mqcloud/console/lockouts.py), and platform admins unlock at
# /lockouts/. Behind a load balancer set LOGIN_PROXY_COUNT so the client's address comes
# from X-Forwarded-For.
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
AXES_IPWARE_PROXY_COUNT = env.int("LOGIN_PROXY_COUNT", default=None)
AXES_IPWARE_META_PRECEDENCE_ORDER = (
    ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"] if AXES_IPWARE_PROXY_COUNT else ["REMOTE_ADDR"]
)

# Anyone may register an account (console-features "Accounts": on by default); it belongs
# to no team until a team's admin adds it. Off: only platform admins add accounts.
SELF_REGISTRATION = env.bool("SELF_REGISTRATION", default=True)
# accounts one client address may register per hour (0: no limit)
SIGNUP_LIMIT_PER_HOUR = env.int("SIGNUP_LIMIT_PER_HOUR", default=5)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:dashboard"
# behind a single-sign-on proxy, its sign-out URL (else the proxy logs the user in again)
LOGOUT_REDIRECT_URL = env.str("LOGIN_HEADER_LOGOUT_URL", default="login")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "mqcloud.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Request bodies are JSON only. Form encodings cannot say what the schema says (null
    # versus an empty string, lists, objects), and DRF reads them by HTML-form rules
    # (an empty field is null or absent), so the schema would not be what the API does.
    "DEFAULT_PARSER_CLASSES": ["mqcloud.api.parsers.JSONBodyParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_PAGINATION_CLASS": "mqcloud.api.query.StrictLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "mqcloud.api.query.StrictDjangoFilterBackend",
        "mqcloud.api.query.StrictOrderingFilter",
        "mqcloud.api.query.StrictSearchFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "mqcloud.api.errors.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "mqcloud API",
    "DESCRIPTION": (
        "Clusters, brokers, topics, apps, producer/consumer policies, applications, consumer"
        " lag and messages of mqcloud.\n\n"
        "**Authentication.** Every endpoint needs a personal API token:"
        " `Authorization: Bearer <token>`. Create one in the console under **API tokens**"
        " (`/tokens/`: named, optionally read-only and expiring, shown once), or with"
        " `POST /api/v1/api-tokens/` once you have one; for bootstrap without a console,"
        " `python manage.py issueapitoken <username>`. A console session works too.\n\n"
        "**Errors** share one JSON body, `ApiError`: `{error, message, fields}`. A body"
        " naming an object that does not exist is 400 with the field; a name, code or id"
        " another object already holds is 409. Fields fixed at creation are read-only on"
        " updates. Request bodies are JSON, and each value must have its declared type."
        " No string may contain the NUL character or a lone surrogate (\\ud800-\\udfff),"
        " and arrays and objects nest at most 64 deep."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Broker and BrokerUpdate both carry the broker status: one enum, one name.
    "ENUM_NAME_OVERRIDES": {"BrokerStatusEnum": "brokers.models.Broker.Status"},
    # Swagger UI assets are served from this deployment, never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "mqcloud.api.schema_hooks.declare_errors",
    ],
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    }
}

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default=REDIS_URL)
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Pool processes get 30 s (not 4) to come up: on a busy machine (make run starts the
# JVM of the archive job at the same moment) the default made the worker give up with
# "Could not start worker processes".
CELERY_WORKER_PROC_ALIVE_TIMEOUT = env.float("CELERY_WORKER_PROC_ALIVE_TIMEOUT", default=30.0)
# An application still executing after this long, with no live executor, is failed.
APPLICATION_EXECUTION_LIMIT_SECONDS = env.int("APPLICATION_EXECUTION_LIMIT_SECONDS", default=600)
CELERY_BEAT_SCHEDULE = {
    "broker-liveness": {
        "task": "mqcloud.tasks.mark_silent_brokers_down",
        "schedule": timedelta(seconds=10),
    },
    "preferred-leaders": {
        "task": "mqcloud.tasks.rebalance_preferred_leaders_task",
        "schedule": timedelta(seconds=10),
    },
    "release-delayed-messages": {
        "task": "mqcloud.tasks.release_delayed_messages",
        "schedule": timedelta(seconds=1),
    },
    "retention": {
        "task": "mqcloud.tasks.apply_retention",
        "schedule": timedelta(minutes=1),
    },
    "transaction-sweep": {
        "task": "mqcloud.tasks.sweep_transactions",
        "schedule": timedelta(minutes=1),
    },
    "alert-delivery-retries": {
        "task": "mqcloud.tasks.retry_alert_deliveries",
        "schedule": timedelta(minutes=1),
    },
    "backlog-alerts": {
        "task": "mqcloud.tasks.check_backlog_alerts",
        "schedule": timedelta(minutes=1),
    },
    "dead-letter-alerts": {
        "task": "mqcloud.tasks.check_dead_letter_alerts",
        "schedule": timedelta(minutes=1),
    },
    "process-alerts": {
        "task": "mqcloud.tasks.check_process_alerts",
        "schedule": timedelta(minutes=1),
    },
    "store-latency-alerts": {
        "task": "mqcloud.tasks.check_store_latency_alerts",
        "schedule": timedelta(minutes=1),
    },
    "replica-lag-alerts": {
        "task": "mqcloud.tasks.check_replica_lag_alerts",
        "schedule": timedelta(minutes=1),
    },
    "retention-loss-alerts": {
        "task": "mqcloud.tasks.check_retention_loss_alerts",
        "schedule": timedelta(minutes=1),
    },
    "consume-failure-alerts": {
        "task": "mqcloud.tasks.check_consume_failure_alerts",
        "schedule": timedelta(minutes=1),
    },
    "offset-move-alerts": {
        "task": "mqcloud.tasks.check_offset_move_alerts",
        "schedule": timedelta(minutes=1),
    },
    "blocked-consumer-alerts": {
        "task": "mqcloud.tasks.check_blocked_consumer_alerts",
        "schedule": timedelta(seconds=30),
    },
    "produce-refusal-alerts": {
        "task": "mqcloud.tasks.check_produce_refusal_alerts",
        "schedule": timedelta(minutes=1),
    },
    "traffic-surge-alerts": {
        "task": "mqcloud.tasks.check_traffic_surge_alerts",
        "schedule": timedelta(minutes=5),
    },
    "traffic-silence-alerts": {
        "task": "mqcloud.tasks.check_traffic_silence_alerts",
        "schedule": timedelta(minutes=1),
    },
    "expire-message-exports": {
        "task": "mqcloud.tasks.expire_message_exports",
        "schedule": timedelta(hours=1),
    },
    "traffic-rule-alerts": {
        "task": "mqcloud.tasks.check_traffic_rule_alerts",
        "schedule": timedelta(minutes=1),
    },
    "interrupted-applications": {
        "task": "mqcloud.tasks.fail_interrupted_applications",
        "schedule": timedelta(minutes=1),
    },
    "forget-idle-broadcast-clients": {
        "task": "mqcloud.tasks.forget_idle_broadcast_clients",
        "schedule": timedelta(hours=1),
    },
    "capacity-report": {
        "task": "mqcloud.tasks.make_capacity_report",
        "schedule": timedelta(hours=1),
    },
    "catalog-republish": {
        "task": "mqcloud.tasks.republish_catalog",
        "schedule": timedelta(minutes=1),
    },
}

# Broker processes: ports, advertised host, liveness.
BROKER_ADVERTISED_HOST = env.str("BROKER_ADVERTISED_HOST", default="127.0.0.1")
BROKER_BIND_HOST = env.str("BROKER_BIND_HOST", default="127.0.0.1")
BROKER_REDIS_CONNECTIONS = env.int("BROKER_REDIS_CONNECTIONS", default=64)
# Processes per broker sharing its ports with SO_REUSEPORT (0: one per core).
BROKER_PROCESSES = env.int("BROKER_PROCESSES", default=0)
JMQ4_PORT = env.int("JMQ4_PORT", default=50088)
ZBUS_PORT = env.int("ZBUS_PORT", default=15555)
ZBUS_ADMIN_TOKEN = env.str("ZBUS_ADMIN_TOKEN", default="")  # empty: zbus admin is open
VIBEMQ_PORT = env.int("VIBEMQ_PORT", default=2925)
# A JMQ4 request whose header sendTime is older than this gets code 22 (0: off).
JMQ4_REQUEST_TIMEOUT_MS = env.int("JMQ4_REQUEST_TIMEOUT_MS", default=30_000)
# VibeMQ (brokers/servers/vibemq/config.py `config_from`): anonymous access only when
# turned on; the WebSocket Origin allow-list (empty: any origin); limits and timers.
VIBEMQ_ALLOW_ANONYMOUS = env.bool("VIBEMQ_ALLOW_ANONYMOUS", default=False)
VIBEMQ_WS_ALLOWED_ORIGINS = env.list("VIBEMQ_WS_ALLOWED_ORIGINS", default=[])
VIBEMQ_AUTO_CREATE = env.bool("VIBEMQ_AUTO_CREATE", default=True)
VIBEMQ_MAX_FRAME_SIZE = env.int("VIBEMQ_MAX_FRAME_SIZE", default=1_048_576)
VIBEMQ_ACK_TIMEOUT_MS = env.int("VIBEMQ_ACK_TIMEOUT_MS", default=30_000)
VIBEMQ_MAX_UNACKED = env.int("VIBEMQ_MAX_UNACKED", default=100)
VIBEMQ_FRAMES_PER_SECOND = env.int("VIBEMQ_FRAMES_PER_SECOND", default=0)  # 0: off
VIBEMQ_MAX_CONNECTIONS = env.int("VIBEMQ_MAX_CONNECTIONS", default=10_000)
VIBEMQ_CONNECTIONS_PER_IP = env.int("VIBEMQ_CONNECTIONS_PER_IP", default=600)  # 0: off
VIBEMQ_FANOUT_RETENTION_MS = env.int("VIBEMQ_FANOUT_RETENTION_MS", default=86_400_000)
VIBEMQ_MONITOR_PORT = env.int("VIBEMQ_MONITOR_PORT", default=None)  # /health, /metrics
BROKER_HEARTBEAT_SECONDS = env.float("BROKER_HEARTBEAT_SECONDS", default=2.0)
BROKER_DEAD_AFTER_SECONDS = env.float("BROKER_DEAD_AFTER_SECONDS", default=15.0)
# A broker back from a failure leads its preferred partition groups again once it has been
# up this long (beat's preferred-leader rebalance; the console and API can run it at once).
PREFERRED_LEADER_AUTO_REBALANCE = env.bool("PREFERRED_LEADER_AUTO_REBALANCE", default=True)
PREFERRED_LEADER_HEALTHY_SECONDS = env.float("PREFERRED_LEADER_HEALTHY_SECONDS", default=60.0)

# Pipeline (issue "PySpark data pipeline").
SPARK_MASTER = env.str("SPARK_MASTER", default="local[*]")
# address the Spark driver binds and advertises; unset: 127.0.0.1 with a local master
SPARK_DRIVER_HOST = env.str("SPARK_DRIVER_HOST", default="") or None
ARCHIVE_URL = env.str("ARCHIVE_URL", default=str(BASE_DIR / "archive"))
ARCHIVE_CHECKPOINT_URL = env("ARCHIVE_CHECKPOINT_URL", default="") or None
# The long-lived `pipeline archive` runs the traffic rollup in its own Spark session this
# often (pipeline/schedule.py); a tick with nothing new in the store starts no Spark job.
PIPELINE_ROLLUP_EVERY_MINUTES = env.float("PIPELINE_ROLLUP_EVERY_MINUTES", default=5.0)

# Message exports (applications of kind message_export): where the files go, the most
# messages one exports, and how long a file is kept for download.
EXPORT_DIR = env.str("EXPORT_DIR", default=str(BASE_DIR / "exports"))
MESSAGE_EXPORT_MAX = env.int("MESSAGE_EXPORT_MAX", default=1_000_000)
MESSAGE_EXPORT_RETENTION_DAYS = env.float("MESSAGE_EXPORT_RETENTION_DAYS", default=7.0)

# Alerts.
EMAIL_URL = env.email_url("EMAIL_URL", default="consolemail://")
vars().update(EMAIL_URL)
# an SMTP server that accepts and never answers must not hold an alert check for ever
EMAIL_TIMEOUT = env.float("EMAIL_TIMEOUT", default=10.0)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="mqcloud@localhost")
ALERT_WEBHOOK_URL = env.str("ALERT_WEBHOOK_URL", default="")
ALERT_THROTTLE_SECONDS = env.int("ALERT_THROTTLE_SECONDS", default=3600)
# A channel (SMTP, webhook, SMS gateway) that failed is not tried for this long; what it
# was to carry is sent again (every minute, for ALERT_RETRY_HOURS) once it is over.
ALERT_CHANNEL_PAUSE_SECONDS = env.int("ALERT_CHANNEL_PAUSE_SECONDS", default=60)
ALERT_RETRY_HOURS = env.float("ALERT_RETRY_HOURS", default=24)
# The daily capacity report is e-mailed to the platform admins; its link to /capacity/
# needs the console's address as users reach it (empty: no link).
CAPACITY_REPORT_MAIL = env.bool("CAPACITY_REPORT_MAIL", default=True)
CONSOLE_PUBLIC_URL = env.str("CONSOLE_PUBLIC_URL", default="")
# Text messages for the users who opted in (their phone number, on the alerts page): an
# HTTP gateway taking POST {"to": [numbers], "text": ...}; empty: no text messages. The
# token, when set, goes as "Authorization: Bearer <token>" (keep it in the environment).
SMS_GATEWAY_URL = env.str("SMS_GATEWAY_URL", default="")
SMS_GATEWAY_TOKEN = env.str("SMS_GATEWAY_TOKEN", default="")
# A consumer that failed this many messages in the last hour alerts its team (0: never).
CONSUME_FAILURE_ALERT_PER_HOUR = env.int("CONSUME_FAILURE_ALERT_PER_HOUR", default=10)
# A consumer whose committed offset moved this many times in the last hour other than by
# consuming (a client's forceAck rewound or skipped it, or committed past the end) alerts
# its team (0: never).
OFFSET_MOVE_ALERT_PER_HOUR = env.int("OFFSET_MOVE_ALERT_PER_HOUR", default=1)
# An app whose messages the engine refused this many times on a topic in the last hour
# (rate limit, too large, invalid, not allowed, queue full) alerts its team (0: never).
PRODUCE_REFUSAL_ALERT_PER_HOUR = env.int("PRODUCE_REFUSAL_ALERT_PER_HOUR", default=10)
# A sequential consumer whose ack index has not moved for this many seconds, on a
# partition with messages waiting, while it kept fetching alerts its team (0: never).
CONSUMER_BLOCKED_ALERT_S = env.float("CONSUMER_BLOCKED_ALERT_S", default=60)
# A broker or HTTP-MQ process whose store writes in the last minute took more than this
# at most, or at the 99th percentile, alerts the platform admins (0: that test off).
STORE_SLOW_MAX_MS = env.int("STORE_SLOW_MAX_MS", default=500)
STORE_SLOW_P99_MS = env.int("STORE_SLOW_P99_MS", default=400)
# A store replica more than this many bytes of the replication stream behind its master,
# or not online, alerts the platform admins (0: never).
REPLICA_LAG_ALERT_BYTES = env.int("REPLICA_LAG_ALERT_BYTES", default=10 * 1024 * 1024)
# A consumer whose unconsumed messages come to about this many bytes (its lag times its
# topic's average message size) alerts its team (0: never).
LAG_BYTES_ALERT_BYTES = env.int("LAG_BYTES_ALERT_BYTES", default=1024 * 1024 * 1024)
# A broadcast client that has not fetched for this many days is forgotten with its
# progress and own retries (0: kept for ever); fetching again, it starts anew.
BROADCAST_CLIENT_RETENTION_DAYS = env.float("BROADCAST_CLIENT_RETENTION_DAYS", default=30)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        # Celery's three INFO lines per run of a task beat sends every few seconds
        "routine_tasks": {
            "()": "mqcloud.routine_logs.RoutineTaskLines",
            "tasks": routine_tasks(CELERY_BEAT_SCHEDULE),
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {name: {"filters": ["routine_tasks"]} for name in ROUTINE_TASK_LOGGERS},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
