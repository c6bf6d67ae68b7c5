from __future__ import annotations

from django.apps import AppConfig
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.utils.translation import gettext_lazy as _


class RateLimitsConfig(AppConfig):
    name = "django_ratelimits"
    verbose_name = _("Rate limits")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_ratelimits import (
            checks,  # noqa: F401  (registers the system checks)
            logins,
        )

        user_login_failed.connect(
            logins.login_failed, dispatch_uid="django_ratelimits.login_failed"
        )
        user_logged_in.connect(logins.logged_in, dispatch_uid="django_ratelimits.logged_in")
