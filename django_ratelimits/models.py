"""Rate-limit policies as admin edits them, and the stamp that tells workers to reload.

A :class:`Policy` row compiles to a :class:`~django_ratelimits.policies.spec.PolicySpec`
with :meth:`Policy.to_spec`; :meth:`Policy.clean` reports every problem next to
the field that causes it. :class:`PolicyVersion` is one row whose ``stamp``
changes whenever any policy is saved, deleted or bulk-updated, so a worker
notices an edit with one tiny query (see :mod:`django_ratelimits.policies.registry`).
:class:`OffenderDashboard` holds no data: it is the offender dashboard's entry on the
admin index and in admin's sidebar, beside the policies.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils.translation import gettext_lazy as _

from django_ratelimits.engine import Algorithm, Identity
from django_ratelimits.policies.labels import (
    ALGORITHM_LABELS,
    KEY_LABELS,
    MODE_LABELS,
    RECORDING_LABELS,
    choices,
)
from django_ratelimits.policies.parse import (
    PATH_MAX_LENGTH,
    check_burst,
    check_key_arg,
    parse_cidrs,
    parse_identity_budget,
    parse_methods,
    parse_path,
    parse_policy_rates,
    parse_tier_attribute,
)
from django_ratelimits.policies.rate_overrides import OwnRates
from django_ratelimits.policies.spec import KeyKind, Mode, PolicySpec, Recording
from django_ratelimits.policies.tiers import Tier
from django_ratelimits.rates import Rate


class PolicyQuerySet(models.QuerySet["Policy"]):
    """``update()`` sends no ``post_save``, so it changes the version stamp itself.

    ``bulk_update()`` goes through ``update()``; ``bulk_create()`` and raw SQL
    must call :meth:`PolicyVersion.bump` themselves.
    """

    def update(self, **kwargs: Any) -> int:
        rows = super().update(**kwargs)
        if rows:
            PolicyVersion.bump()
        return rows


class Policy(models.Model):
    name = models.SlugField(
        _("name"),
        max_length=64,
        unique=True,
        help_text=_("Letters, digits, hyphens and underscores. Decorators refer to it."),
    )
    description = models.TextField(_("description"), blank=True)
    enabled = models.BooleanField(
        _("enabled"), default=True, help_text=_("A disabled policy is not enforced anywhere.")
    )
    mode = models.CharField(
        _("mode"), max_length=16, choices=choices(MODE_LABELS), default=Mode.ENFORCE.value
    )
    algorithm = models.CharField(
        _("algorithm"),
        max_length=32,
        choices=choices(ALGORITHM_LABELS),
        default=Algorithm.SLIDING_WINDOW.value,
    )
    rates = models.CharField(
        _("rates"),
        max_length=200,
        help_text=_(
            "One or more limits, all checked together, e.g. “10/s, 120/m, 240/h” "
            "or “100/5m”. Units: s, m, h, d."
        ),
    )
    burst = models.PositiveIntegerField(
        _("burst"),
        null=True,
        blank=True,
        help_text=_(
            "Token bucket and GCRA only: how many requests may arrive at once "
            "(the bucket size). Empty: the rate's limit."
        ),
    )
    key = models.CharField(
        _("count by"), max_length=16, choices=choices(KEY_LABELS), default=KeyKind.IP.value
    )
    key_arg = models.CharField(
        _("key argument"),
        max_length=200,
        blank=True,
        help_text=_(
            "For “a request header”: the header name, e.g. X-Api-Key. For “a callable”: "
            "the dotted path of a function(request) returning a string or None."
        ),
    )
    identity_budget = models.CharField(
        _("identity budget"),
        max_length=50,
        blank=True,
        help_text=_(
            "For a header, a callable or users: how many different values one client IP "
            "may bring per period, e.g. “50/h”; past it, its requests count against the IP "
            "under this policy's rates. Empty: the IDENTITY_BUDGET setting. “off”: no budget."
        ),
    )
    path = models.CharField(
        _("path pattern"),
        max_length=PATH_MAX_LENGTH,
        blank=True,
        help_text=_(
            "A regular expression searched in the request path, e.g. ^/api/. Start it "
            "with ^ for the fastest matching. Empty: only where a decorator names this policy."
        ),
    )
    methods = models.CharField(
        _("HTTP methods"),
        max_length=100,
        blank=True,
        help_text=_(
            "Comma-separated, e.g. “GET, POST”. Empty: every method. GET covers HEAD "
            "too: Django answers HEAD with the GET code."
        ),
    )
    exempt_staff = models.BooleanField(_("exempt staff"), default=False)
    exempt_superusers = models.BooleanField(_("exempt superusers"), default=False)
    allow_cidrs = models.TextField(
        _("exempt networks"),
        blank=True,
        help_text=_(
            "Addresses or networks never limited, one per line or comma-separated, e.g. 10.0.0.0/8."
        ),
    )
    fail_closed = models.BooleanField(
        _("fail closed"),
        default=False,
        help_text=_(
            "Deny requests while Redis is unreachable. Unchecked (the default): let them through."
        ),
    )
    record_metadata = models.CharField(
        _("record who"),
        max_length=16,
        choices=choices(RECORDING_LABELS),
        default=Recording.DENIALS.value,
        help_text=_(
            "Which requests to record the user (or IP) and path of, for the offender "
            "dashboard. Denials (the default) answer who was denied, at little cost; "
            "every hit also shows who was allowed."
        ),
    )
    priority = models.IntegerField(
        _("priority"), default=0, help_text=_("Higher priorities are checked first.")
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    objects = PolicyQuerySet.as_manager()

    class Meta:
        ordering = ("-priority", "name")
        verbose_name = _("rate-limit policy")
        verbose_name_plural = _("rate-limit policies")
        permissions = [
            ("view_offenders", _("Can view rate-limit offenders")),
            ("reset_offenders", _("Can reset rate-limit offenders")),
            ("block_offenders", _("Can block rate-limit offenders")),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Check every field against the others; store the canonical forms.

        Every error is keyed by the field it concerns, so admin shows it there.
        """
        errors: dict[str, ValidationError] = {}
        # An empty rate is the field's own "required" error.
        rates = _collect(errors, "rates", parse_policy_rates, self.rates) if self.rates else None
        if rates is not None:
            self.rates = ", ".join(str(rate) for rate in rates)
            _collect(errors, "burst", check_burst, self.algorithm, rates, self.burst)
        _collect(errors, "path", parse_path, self.path)
        methods = _collect(errors, "methods", parse_methods, self.methods)
        if methods is not None:
            self.methods = ", ".join(sorted(methods))
        networks = _collect(errors, "allow_cidrs", parse_cidrs, self.allow_cidrs)
        if networks is not None:
            self.allow_cidrs = "\n".join(str(network) for network in networks)
        _collect(errors, "key_arg", check_key_arg, self.key, self.key_arg, True)
        budget = _collect(errors, "identity_budget", parse_identity_budget, self.identity_budget)
        if budget is not None:
            self.identity_budget = _budget_text(budget)
        if errors:
            raise ValidationError(errors)

    def to_spec(self) -> PolicySpec:
        """The compiled policy; raises ``ValidationError`` if a field is invalid."""
        check_key_arg(self.key, self.key_arg, False)
        parse_path(self.path)
        return PolicySpec(
            name=self.name,
            rates=parse_policy_rates(self.rates),
            algorithm=Algorithm(self.algorithm),
            burst=self.burst,
            mode=Mode(self.mode),
            key=KeyKind(self.key),
            key_arg=self.key_arg,
            path=self.path,
            methods=parse_methods(self.methods),
            exempt_staff=self.exempt_staff,
            exempt_superusers=self.exempt_superusers,
            allow_cidrs=parse_cidrs(self.allow_cidrs),
            fail_closed=self.fail_closed,
            record_metadata=Recording(self.record_metadata),
            priority=self.priority,
            description=self.description,
            identity_budget=parse_identity_budget(self.identity_budget),
            tiers=tuple(tier.to_tier() for tier in self.tiers.all()) if self.pk else (),
        )


def spec_fields(spec: PolicySpec) -> dict[str, Any]:
    """The field values of a :class:`Policy` row that compiles to ``spec``."""
    return {
        "name": spec.name,
        "description": spec.description,
        "enabled": True,
        "mode": spec.mode.value,
        "algorithm": spec.algorithm.value,
        "rates": ", ".join(str(rate) for rate in spec.rates),
        "burst": spec.burst,
        "key": spec.key.value,
        "key_arg": spec.key_arg,
        "path": spec.path,
        "methods": ", ".join(sorted(spec.methods)),
        "exempt_staff": spec.exempt_staff,
        "exempt_superusers": spec.exempt_superusers,
        "allow_cidrs": "\n".join(str(network) for network in spec.allow_cidrs),
        "fail_closed": spec.fail_closed,
        "record_metadata": spec.record_metadata.value,
        "priority": spec.priority,
        "identity_budget": _budget_text(spec.identity_budget),
    }


def _budget_text(budget: Rate | str) -> str:
    """An identity budget as the field stores it: a rate, ``off``, or empty for the default."""
    return "" if budget == "default" else str(budget)


def _collect(errors: dict[str, ValidationError], field: str, check: Any, *args: Any) -> Any:
    """``check(*args)``, or None with its ``ValidationError`` filed under ``field``."""
    try:
        return check(*args)
    except ValidationError as exc:
        errors[field] = exc
        return None


class PolicyVersion(models.Model):
    """One row (``pk=1``) whose ``stamp`` changes with every policy edit.

    The stamp is random rather than a counter: a counter can come back to a
    value a worker has already seen (a restored backup, a rolled-back test
    transaction, a flushed table), a 62-bit random stamp practically cannot.
    It changes in the same transaction as the edit.
    """

    stamp = models.BigIntegerField(_("stamp"), default=0)

    class Meta:
        verbose_name = _("policy version")
        verbose_name_plural = _("policy versions")
        default_permissions = ()

    @classmethod
    def bump(cls) -> None:
        stamp = secrets.randbits(62)
        if not cls.objects.filter(pk=1).update(stamp=stamp):
            cls.objects.update_or_create(pk=1, defaults={"stamp": stamp})

    @classmethod
    def current(cls) -> int | None:
        """The stamp (one single-row query); None before the first edit."""
        return cls.objects.filter(pk=1).values_list("stamp", flat=True).first()


class OffenderDashboard(Policy):
    """The offender dashboard's entry in admin's app list (index and sidebar).

    A proxy: no table, no permissions of its own (the dashboard's are the policy
    model's ``view_offenders`` and the rest). Its admin changelist redirects to
    the dashboard; nothing else reads or writes through it.
    """

    class Meta:
        proxy = True
        verbose_name = _("offender")
        verbose_name_plural = _("offenders")
        default_permissions = ()


class PolicyTier(models.Model):
    """Other rates of a policy for the users of a group, or of a plan (an attribute's
    value); compiled to a :class:`~django_ratelimits.policies.tiers.Tier`."""

    GROUP, ATTRIBUTE = "group", "attribute"

    policy = models.ForeignKey(
        Policy, on_delete=models.CASCADE, related_name="tiers", verbose_name=_("policy")
    )
    order = models.PositiveSmallIntegerField(
        _("order"), default=0, help_text=_("The first tier that matches the user applies.")
    )
    match = models.CharField(
        _("match"),
        max_length=16,
        choices=[(GROUP, _("users in the group")), (ATTRIBUTE, _("users whose attribute"))],
        default=GROUP,
    )
    name = models.CharField(
        _("group or attribute"),
        max_length=150,
        help_text=_(
            "A group name, or an attribute path of the user such as “profile.plan”: plain "
            "names only. The attribute must be set by your server, never by the user."
        ),
    )
    value = models.CharField(
        _("equals"), max_length=100, blank=True, help_text=_("For an attribute: the value.")
    )
    rates = models.CharField(_("rates"), max_length=200, help_text=_("e.g. “10000/h”."))

    class Meta:
        ordering = ("order", "pk")
        verbose_name = _("tier")
        verbose_name_plural = _("tiers")

    def __str__(self) -> str:
        return f"{self.name}={self.value}" if self.match == self.ATTRIBUTE else self.name

    def clean(self) -> None:
        errors: dict[str, ValidationError] = {}
        rates = _collect(errors, "rates", parse_policy_rates, self.rates) if self.rates else None
        if rates is not None:
            self.rates = ", ".join(str(rate) for rate in rates)
        if self.match == self.ATTRIBUTE:
            _collect(errors, "name", parse_tier_attribute, self.name)
        elif self.name and not _group_exists(self.name):
            errors["name"] = ValidationError(
                _("No group is named “%(name)s”."), code="no_group", params={"name": self.name}
            )
        if errors:
            raise ValidationError(errors)

    def to_tier(self) -> Tier:
        rates = parse_policy_rates(self.rates)
        if self.match == self.ATTRIBUTE:
            return Tier(rates, attribute=parse_tier_attribute(self.name), value=self.value)
        return Tier(rates, group=self.name)


def _group_exists(name: str) -> bool:
    from django.contrib.auth.models import Group  # the app works without contrib.auth

    return Group.objects.filter(name=name).exists()


class RateOverride(models.Model):
    """One identity's own rates under a policy (or every policy) until ``expires_at``.

    ``identity_kind`` and ``identity_value`` are what the limiter counts, as
    :func:`django_ratelimits.offenders.identities.resolve` gives them (admin and
    the command resolve what staff typed before saving).
    """

    policy = models.ForeignKey(
        Policy,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="overrides",
        verbose_name=_("policy"),
        help_text=_("Empty: every policy that counts this kind of identity."),
    )
    identity_kind = models.CharField(_("identity kind"), max_length=16)
    identity_value = models.CharField(_("identity"), max_length=1000)
    rates = models.CharField(_("rates"), max_length=200, help_text=_("e.g. “10000/h”."))
    expires_at = models.DateTimeField(_("expires"))
    reason = models.CharField(_("reason"), max_length=200)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ("-created_at", "-pk")
        verbose_name = _("identity override")
        verbose_name_plural = _("identity overrides")

    def __str__(self) -> str:
        return f"{self.identity_kind}:{self.identity_value}"

    def clean(self) -> None:
        errors: dict[str, ValidationError] = {}
        rates = _collect(errors, "rates", parse_policy_rates, self.rates) if self.rates else None
        if rates is not None:
            self.rates = ", ".join(str(rate) for rate in rates)
        if self.policy is not None and self.identity_kind:
            kinds = KeyKind(self.policy.key).identity_kinds
            if self.identity_kind not in kinds:
                errors["policy"] = ValidationError(
                    _("This policy counts %(kinds)s, never a %(kind)s."),
                    code="kind_not_counted",
                    params={"kinds": ", ".join(sorted(kinds)), "kind": self.identity_kind},
                )
        if errors:
            raise ValidationError(errors)

    def to_own_rates(self) -> OwnRates:
        return OwnRates(
            Identity(self.identity_kind, self.identity_value),
            parse_policy_rates(self.rates),
            self.expires_at.timestamp(),
            self.policy.name if self.policy is not None else "",
        )


@receiver(post_save, sender=Policy, dispatch_uid="django_ratelimits.policy_saved")
@receiver(post_delete, sender=Policy, dispatch_uid="django_ratelimits.policy_deleted")
@receiver(post_save, sender=PolicyTier, dispatch_uid="django_ratelimits.tier_saved")
@receiver(post_delete, sender=PolicyTier, dispatch_uid="django_ratelimits.tier_deleted")
@receiver(post_save, sender=RateOverride, dispatch_uid="django_ratelimits.override_saved")
@receiver(post_delete, sender=RateOverride, dispatch_uid="django_ratelimits.override_deleted")
def _policy_changed(**kwargs: Any) -> None:
    PolicyVersion.bump()
