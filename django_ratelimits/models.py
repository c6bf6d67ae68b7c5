"""Rate-limit policies as admin edits them, and the stamp that tells workers to reload.

A :class:`Policy` row compiles to a :class:`~django_ratelimits.policies.spec.PolicySpec`
with :meth:`Policy.to_spec`; :meth:`Policy.clean` reports every problem next to
the field that causes it. :class:`PolicyVersion` is one row whose ``stamp``
changes whenever any policy is saved, deleted or bulk-updated, so a worker
notices an edit with one tiny query (see :mod:`django_ratelimits.policies.registry`).
:class:`BlockedNetwork` is a network refused before any limit is checked
(``docs/blocklist.md``); its edits change the same stamp.
:class:`OffenderDashboard` holds no data: it is the offender dashboard's entry on the
admin index and in admin's sidebar, beside the policies.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy, pgettext_lazy

from django_ratelimits.engine import Algorithm, Ban, Identity
from django_ratelimits.policies.labels import (
    ALGORITHM_LABELS,
    COUNTS_LABELS,
    KEY_LABELS,
    MODE_LABELS,
    RECORDING_LABELS,
    choices,
    kind_label,
    kinds_label,
)
from django_ratelimits.policies.networks import NETWORK_MAX_LENGTH, parse_network
from django_ratelimits.policies.parse import (
    PATH_MAX_LENGTH,
    check_burst,
    check_cost,
    check_key_arg,
    check_log_size,
    check_login_key,
    check_path_start,
    parse_ban,
    parse_cidrs,
    parse_identity_budget,
    parse_lease,
    parse_methods,
    parse_path,
    parse_policy_rates,
    parse_tier_attribute,
    policy_rates,
    rates_text,
)
from django_ratelimits.policies.rate_overrides import OwnRates
from django_ratelimits.policies.spec import MAX_COST, Counts, KeyKind, Mode, PolicySpec, Recording
from django_ratelimits.policies.tiers import Tier
from django_ratelimits.rates import Rate, format_period

_Row = TypeVar("_Row", bound=models.Model)


class StampedQuerySet(models.QuerySet[_Row]):
    """``update()`` sends no ``post_save``, so it changes the version stamp itself, on
    the database it updated (``.using(alias)``'s, else the router's for writes).

    ``bulk_update()`` goes through ``update()``; ``bulk_create()`` and raw SQL
    must call :meth:`PolicyVersion.bump` themselves (with ``using=`` their database).
    """

    def update(self, **kwargs: Any) -> int:
        rows = super().update(**kwargs)
        if rows:
            PolicyVersion.bump(using=self.db)  # update() made self a query for writes
        return rows


class PolicyQuerySet(StampedQuerySet["Policy"]):
    """Policies: every edit, bulk ones too, changes the version stamp."""


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
            "or “100/5m”. Units: s, m, h, d. Concurrency: how many requests may be in "
            "flight at once, e.g. “5” or “5/concurrent”."
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
    counts = models.CharField(
        pgettext_lazy("what a policy counts", "counts"),
        max_length=16,
        choices=choices(COUNTS_LABELS),
        default=Counts.REQUESTS.value,
        help_text=_(
            "Failed logins only: Django's failed-login signal charges the policy, and a "
            "login over the limit is refused before its password is checked. The path "
            "pattern, if any, names the login URLs it guards. See docs/logins.md."
        ),
    )
    reset_on_success = models.BooleanField(
        _("reset on successful login"),
        default=False,
        help_text=_(
            "Failed logins only: a successful login clears this policy's counters of the "
            "username (and of the IP and username pair), never the IP's alone."
        ),
    )
    cost = models.PositiveIntegerField(
        _("cost per request"),
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_COST)],
        help_text=_(
            "What one request spends of each rate, e.g. 5 for an expensive endpoint: "
            "on “10/h” it may then be made twice an hour. At most what each rate allows."
        ),
    )
    lease = models.PositiveIntegerField(
        _("lease"),
        null=True,
        blank=True,
        help_text=_(
            "Concurrency only: the most seconds a request holds its slot, so that a "
            "worker killed mid-request frees it then. Set it above your longest request. "
            "Empty: 60."
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
            "Comma-separated, e.g. “GET, POST”. Empty: every method. GET covers every "
            "method but POST, PUT, PATCH and DELETE (HEAD, OPTIONS, TRACE): a view that "
            "does not check the method answers them with its GET code."
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
    ban_after = models.PositiveIntegerField(
        _("ban after"),
        default=0,
        help_text=_(
            "Block an identity after this many denials by this policy within “ban within”, "
            "for “ban for”, doubled on each repeat up to “longest ban”. 0: never ban."
        ),
    )
    ban_within = models.CharField(
        _("ban within"),
        max_length=20,
        blank=True,
        help_text=_("The period the denials are counted in, e.g. “10m”. Up to 30 days."),
    )
    ban_for = models.CharField(
        _("ban for"),
        max_length=20,
        blank=True,
        help_text=_("How long the first ban lasts, e.g. “15m”. Up to 30 days."),
    )
    ban_max = models.CharField(
        _("longest ban"),
        max_length=20,
        blank=True,
        help_text=_(
            "The cap of the doubling, e.g. “1d”; forgotten after this long with no new ban. "
            "Empty: “ban for” (no doubling)."
        ),
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
        lease = _collect(errors, "lease", parse_lease, self.algorithm, self.lease)
        rates = None
        if self.rates:
            rates = _collect(errors, "rates", policy_rates, self.algorithm, self.rates, lease)
        if rates is not None:
            self.rates = rates_text(self.algorithm, rates)
            _collect(errors, "rates", check_log_size, self.algorithm, rates)
            _collect(errors, "burst", check_burst, self.algorithm, rates, self.burst)
            if "burst" not in errors:
                _collect(errors, "cost", check_cost, self.cost, self.algorithm, rates, self.burst)
        if _collect(errors, "path", parse_path, self.path) is not None:
            _collect(errors, "path", check_path_start, self.path)
        methods = _collect(errors, "methods", parse_methods, self.methods)
        if methods is not None:
            self.methods = ", ".join(sorted(methods))
        networks = _collect(errors, "allow_cidrs", parse_cidrs, self.allow_cidrs)
        if networks is not None:
            self.allow_cidrs = "\n".join(str(network) for network in networks)
        _collect(errors, "key_arg", check_key_arg, self.key, self.key_arg, True)
        _collect(errors, "key", check_login_key, self.counts, self.key)
        if self.reset_on_success and self.counts != Counts.FAILED_LOGINS:
            errors["reset_on_success"] = ValidationError(
                _("Only a policy that counts failed logins resets on a successful login."),
                code="reset_needs_logins",
            )
        elif self.reset_on_success and self.key == KeyKind.IP:
            errors["reset_on_success"] = ValidationError(
                _(
                    "A successful login clears only the username's counters, never the "
                    "client IP's: anyone with an account could clear the failures an "
                    "address made against others. Count by username too, or leave this off."
                ),
                code="reset_needs_username",
            )
        budget = _collect(errors, "identity_budget", parse_identity_budget, self.identity_budget)
        if budget is not None:
            self.identity_budget = _budget_text(budget)
        try:
            ban = parse_ban(self.ban_after, self.ban_within, self.ban_for, self.ban_max)
        except ValidationError as exc:
            errors.update(
                (field, ValidationError(found)) for field, found in exc.error_dict.items()
            )
        else:
            if ban is not None:
                self.ban_within, self.ban_for, self.ban_max = _ban_texts(ban)
        if self.pk is not None and "key" not in errors and "lease" not in errors:
            self._check_overrides(errors)
        if errors:
            raise ValidationError(errors)

    def _check_overrides(self, errors: dict[str, ValidationError]) -> None:
        """Refuse an edit that would leave this policy's identity overrides unused: a key
        that no longer counts their kind, or an algorithm their rates do not fit (the
        registry would skip them, while admin still lists them as in force)."""
        try:
            kinds = KeyKind(self.key).identity_kinds
        except ValueError:  # not a key: its field says so
            return
        stranded: dict[str, list[str]] = {"key": [], "algorithm": []}  # by the field to blame
        for override in self.overrides.all()[:_OVERRIDES_CHECKED]:
            try:
                rates_under(self, override.rates)
            except ValidationError:
                stranded["algorithm"].append(str(override))
                continue
            if override.identity_kind not in kinds:
                stranded["key"].append(str(override))
        for field, names in stranded.items():
            if names:
                errors[field] = ValidationError(
                    ngettext_lazy(
                        "%(count)d identity override of this policy would no longer apply "
                        "(%(names)s): change or delete it first.",
                        "%(count)d identity overrides of this policy would no longer apply "
                        "(%(names)s): change or delete them first.",
                        "count",
                    ),
                    code="overrides_stranded",
                    params={"count": len(names), "names": ", ".join(names[:5])},
                )

    def to_spec(self) -> PolicySpec:
        """The compiled policy; raises ``ValidationError`` if a field is invalid."""
        check_key_arg(self.key, self.key_arg, False)
        check_login_key(self.counts, self.key)
        parse_path(self.path)
        return PolicySpec(
            name=self.name,
            rates=rates_under(self, self.rates),
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
            counts=Counts(self.counts),
            reset_on_success=self.reset_on_success,
            cost=self.cost,
            ban=parse_ban(self.ban_after, self.ban_within, self.ban_for, self.ban_max),
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
        "rates": rates_text(spec.algorithm, spec.rates),
        "lease": spec.rates[0].period if spec.algorithm is Algorithm.CONCURRENCY else None,
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
        "counts": spec.counts.value,
        "reset_on_success": spec.reset_on_success,
        "cost": spec.cost,
        "ban_after": spec.ban.after if spec.ban else 0,
        **dict(zip(("ban_within", "ban_for", "ban_max"), _ban_texts(spec.ban), strict=True)),
    }


def _ban_texts(ban: Ban | None) -> tuple[str, str, str]:
    """A ban's periods as its fields store them (within, for, longest); empty for none."""
    if ban is None:
        return "", "", ""
    return format_period(ban.within), format_period(ban.duration), format_period(ban.maximum)


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


def rates_under(policy: Policy | None, text: str) -> tuple[Rate, ...]:
    """A tier's or an override's rates text, read as ``policy`` reads its own (N slots
    held at most its lease for a concurrency policy); plain rates for every policy."""
    if policy is None:
        return parse_policy_rates(text)
    return policy_rates(policy.algorithm, text, parse_lease(policy.algorithm, policy.lease))


def _clean_rates(
    row: PolicyTier | RateOverride, errors: dict[str, ValidationError], policy: Policy | None
) -> None:
    """Check ``row.rates`` under ``policy`` (:func:`rates_under`) and store their
    canonical text; an empty field is the field's own "required" error."""
    rates = _collect(errors, "rates", rates_under, policy, row.rates) if row.rates else None
    if rates is not None:
        row.rates = rates_text(policy.algorithm if policy is not None else "", rates)
        if policy is not None:
            _collect(errors, "rates", check_log_size, policy.algorithm, rates)


def _policy_of(tier: PolicyTier) -> Policy | None:
    """The tier's policy, None while a form has not set it yet."""
    try:
        return tier.policy
    except ObjectDoesNotExist:
        return None


class PolicyVersion(models.Model):
    """One row (``pk=1``) whose ``stamp`` changes with every policy edit.

    The stamp is random rather than a counter: a counter can come back to a
    value a worker has already seen (a restored backup, a rolled-back test
    transaction, a flushed table), a 62-bit random stamp practically cannot.
    It changes in the same transaction as the edit, on the database the edit
    went to: a worker reads the stamp where the router reads policies from, so an
    edit written with ``using=`` elsewhere is seen by the workers that read there.
    """

    stamp = models.BigIntegerField(_("stamp"), default=0)

    class Meta:
        verbose_name = _("policy version")
        verbose_name_plural = _("policy versions")
        default_permissions = ()

    @classmethod
    def bump(cls, using: str | None = None) -> None:
        """Change the stamp on database ``using`` (None: the router's for writes)."""
        stamp = secrets.randbits(62)
        rows = cls.objects.using(using)
        if not rows.filter(pk=1).update(stamp=stamp):
            rows.update_or_create(pk=1, defaults={"stamp": stamp})

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


def stored_time(instant: datetime) -> datetime:
    """The aware ``instant`` as a ``DateTimeField`` holds it: itself with ``USE_TZ``,
    else the wall time of ``TIME_ZONE`` then (naive, as Django stores it)."""
    if settings.USE_TZ:
        return instant
    return timezone.make_naive(instant, timezone.get_default_timezone())


def expiry_in(seconds: float, now: float) -> datetime:
    """The expiry ``seconds`` after ``now`` (seconds since the epoch), as a
    ``DateTimeField`` holds it. Added to the instant, not to the wall time: with
    ``USE_TZ = False``, a day from 12:00 the day before clocks go forward is 13:00 the
    next day, not the 12:00 that comes 23 hours later."""
    return stored_time(datetime.fromtimestamp(now, tz=UTC) + timedelta(seconds=seconds))


def instant(value: datetime) -> datetime:
    """A ``DateTimeField``'s value as an aware datetime. Naive (``USE_TZ = False``) is
    the wall time of ``TIME_ZONE``, whatever time zone the process or a request has.
    A wall time the clocks show twice (the hour when daylight saving time ends) reads
    as the later of the two, one they skip as the instant after the gap: an expiry
    read from it comes an hour late at worst, never early (a blocked network then
    stays blocked until the hour the admin shows, rather than lifting an hour
    before it, or at once)."""
    if timezone.is_aware(value):
        return value
    zone = timezone.get_default_timezone()
    return max(
        (value.replace(tzinfo=zone, fold=fold) for fold in (0, 1)),
        key=lambda each: each.timestamp(),
    )


def epoch_seconds(value: datetime) -> float:
    """A ``DateTimeField``'s value in seconds since the epoch (:func:`instant`)."""
    return instant(value).timestamp()


class BlockedNetworkQuerySet(StampedQuerySet["BlockedNetwork"]):
    def active(self) -> BlockedNetworkQuerySet:
        """The entries that block now: enabled, and without an expiry or not yet expired."""
        unexpired = models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=timezone.now())
        return self.filter(unexpired, enabled=True)


class BlockedNetwork(models.Model):
    """A network whose every request is refused (403) before any Redis call.

    Workers hold the enabled rows compiled in memory (see
    :mod:`django_ratelimits.policies.networks`) and see an edit within
    ``POLICY_REFRESH``, through :class:`PolicyVersion` like policies.
    """

    network = models.CharField(
        _("network"),
        max_length=NETWORK_MAX_LENGTH,
        db_index=True,
        help_text=_(
            "An address (203.0.113.7, 2001:db8::7) or a network (203.0.113.0/24, "
            "2001:db8::/32). At most a /8 for IPv4, a /16 for IPv6."
        ),
    )
    reason = models.CharField(
        _("reason"),
        max_length=200,
        blank=True,
        help_text=_("For the admins; never shown to the blocked client."),
    )
    enabled = models.BooleanField(
        _("enabled"), default=True, help_text=_("A disabled entry blocks nothing.")
    )
    expires_at = models.DateTimeField(
        _("expires"),
        null=True,
        blank=True,
        help_text=_("The entry stops blocking at this time. Empty: until removed."),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("created by"),
        null=True,
        blank=True,
        editable=False,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    objects = BlockedNetworkQuerySet.as_manager()

    class Meta:
        ordering = ("-created_at", "network")
        verbose_name = _("blocked network")
        verbose_name_plural = _("blocked networks")

    def __str__(self) -> str:
        return self.network

    def clean(self) -> None:
        """Store the network in canonical form; refuse an expiry already past for a new entry."""
        errors: dict[str, ValidationError] = {}
        network = _collect(errors, "network", parse_network, self.network or "")
        if network is not None:
            self.network = str(network)
        if self._state.adding and self.expires_at is not None and self.expires_at <= timezone.now():
            errors["expires_at"] = ValidationError(
                _("This time has already passed: the entry would block nothing."), code="expired"
            )
        if errors:
            raise ValidationError(errors)


class PolicyTier(models.Model):
    """Other rates of a policy for the users of a group, or of a plan (an attribute's
    value); compiled to a :class:`~django_ratelimits.policies.tiers.Tier`."""

    GROUP, ATTRIBUTE = "group", "attribute"

    policy = models.ForeignKey(
        Policy, on_delete=models.CASCADE, related_name="tiers", verbose_name=_("policy")
    )
    order = models.PositiveSmallIntegerField(
        pgettext_lazy("position in a list", "order"),
        default=0,
        help_text=_("The first tier that matches the user applies."),
    )
    match = models.CharField(
        pgettext_lazy("what a tier matches", "match"),
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

    objects = StampedQuerySet["PolicyTier"].as_manager()

    class Meta:
        ordering = ("order", "pk")
        verbose_name = _("tier")
        verbose_name_plural = _("tiers")

    def __str__(self) -> str:
        return f"{self.name}={self.value}" if self.match == self.ATTRIBUTE else self.name

    def clean(self) -> None:
        errors: dict[str, ValidationError] = {}
        _clean_rates(self, errors, _policy_of(self))
        if self.match == self.ATTRIBUTE:
            _collect(errors, "name", parse_tier_attribute, self.name)
        elif self.name and not _group_exists(self.name):
            errors["name"] = ValidationError(
                _("No group is named “%(name)s”."), code="no_group", params={"name": self.name}
            )
        if errors:
            raise ValidationError(errors)

    def to_tier(self) -> Tier:
        rates = rates_under(self.policy, self.rates)
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
        help_text=_(
            "Empty: every policy that counts requests of this kind of identity (not "
            "concurrency or failed-login policies: name one to override it)."
        ),
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

    objects = StampedQuerySet["RateOverride"].as_manager()

    class Meta:
        ordering = ("-created_at", "-pk")
        verbose_name = _("identity override")
        verbose_name_plural = _("identity overrides")

    def __str__(self) -> str:
        return f"{self.identity_kind}:{self.identity_value}"

    def clean(self) -> None:
        errors: dict[str, ValidationError] = {}
        _clean_rates(self, errors, self.policy)
        if self.policy is not None and self.identity_kind:
            kinds = KeyKind(self.policy.key).identity_kinds
            if self.identity_kind not in kinds:
                errors["policy"] = ValidationError(
                    _("This policy counts %(kinds)s, never %(kind)s."),
                    code="kind_not_counted",
                    params={"kinds": kinds_label(kinds), "kind": kind_label(self.identity_kind)},
                )
        elif self.identity_kind and not _counted_by_a_policy(self.identity_kind):
            errors["policy"] = ValidationError(
                _(
                    "No enabled policy counts the requests of %(kind)s identities by rates "
                    "over time (an override for every policy leaves concurrency and "
                    "failed-login policies alone): this override would apply to nothing."
                ),
                code="kind_not_counted",
                params={"kind": kind_label(self.identity_kind)},
            )
        if errors:
            raise ValidationError(errors)

    def to_own_rates(self) -> OwnRates:
        return OwnRates(
            Identity(self.identity_kind, self.identity_value),
            rates_under(self.policy, self.rates),
            epoch_seconds(self.expires_at),
            self.policy.name if self.policy is not None else "",
        )


# The overrides of one policy its edit checks (the rest apply as the first do).
_OVERRIDES_CHECKED = 1000


def _counted_by_a_policy(kind: str) -> bool:
    """Whether an enabled policy that counts requests by rates over time counts
    identities of ``kind`` (an override for every policy applies to those, and spares
    concurrency and failed-login policies: ``rate_overrides._spared``)."""
    keys = (
        Policy.objects.filter(enabled=True)
        .exclude(algorithm=Algorithm.CONCURRENCY)
        .exclude(counts=Counts.FAILED_LOGINS)
        .values_list("key", flat=True)
        .distinct()
    )
    return any(kind in KeyKind(key).identity_kinds for key in keys)


STAMPED_MODELS = (Policy, BlockedNetwork, PolicyTier, RateOverride)
"""The models whose rows workers load: saving or deleting one changes the stamp, and
every worker reloads within ``POLICY_REFRESH`` (the test kit's at the next request)."""


def _policy_changed(using: str, **kwargs: Any) -> None:
    """post_save and post_delete: the stamp changes on the database written."""
    PolicyVersion.bump(using=using)


for _model in STAMPED_MODELS:
    _uid = f"django_ratelimits.{_model._meta.model_name}"
    post_save.connect(_policy_changed, sender=_model, dispatch_uid=f"{_uid}_saved")
    post_delete.connect(_policy_changed, sender=_model, dispatch_uid=f"{_uid}_deleted")
