from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RateLimitsConfig(AppConfig):
    name = "django_ratelimits"
    verbose_name = _("Rate limits")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_ratelimits import checks  # noqa: F401  (registers the system checks)
