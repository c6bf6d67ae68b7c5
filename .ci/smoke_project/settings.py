"""A project that knows django-ratelimits only as an installed wheel (see .ci/wheel-check)."""

import os

BASE = os.path.dirname(os.path.abspath(__file__))
SECRET_KEY = "wheel-check-only"
DEBUG = False
ALLOWED_HOSTS = ["localhost"]
ROOT_URLCONF = "urls"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_ratelimits",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_ratelimits.middleware.RateLimitMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(BASE, "db.sqlite3")}
}
STATIC_URL = "/static/"
STATIC_ROOT = os.path.join(BASE, "static")
DJANGO_RATELIMITS = {"REDIS": os.environ.get("SMOKE_REDIS_URL", "redis://127.0.0.1:6399/0")}
