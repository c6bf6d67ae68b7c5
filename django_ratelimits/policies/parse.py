"""Parsing a policy's admin text, shared by ``Policy.clean()`` and ``Policy.to_spec()``.

Each function takes the field as stored and returns its compiled form, or
raises a ``ValidationError`` with a translatable message that admin shows
next to the field.
"""

from __future__ import annotations

import ipaddress
import keyword
import re
from typing import TYPE_CHECKING, Final, Literal

from django.core.exceptions import ValidationError
from django.utils.functional import lazy
from django.utils.module_loading import import_string
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_ratelimits import key_functions
from django_ratelimits.conf import DOTTED_PATH, HEADER_NAME, IPNetwork, ip_network
from django_ratelimits.engine.limits import (
    MAX_BAN_AFTER,
    MAX_BAN_SECONDS,
    MAX_BURST,
    Algorithm,
    Ban,
    Limit,
    ban_problem,
    burst_problem,
)
from django_ratelimits.errors import RateParseError, Reason
from django_ratelimits.policies.matching import PathPattern, PatternError, literal_prefix
from django_ratelimits.policies.spec import LOGIN_KEYS, MAX_COST, Counts, KeyKind, cost_problem
from django_ratelimits.policies.tiers import AttributePathError, parse_attribute_path
from django_ratelimits.rates import (
    MAX_LIMIT,
    Rate,
    format_period,
    parse_period,
    parse_rate,
    parse_rates,
)

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as StrOrPromise

__all__ = [
    "DEFAULT_LEASE",
    "HTTP_METHODS",
    "LOG_MAX",
    "MAX_LEASE",
    "MAX_NETWORKS",
    "PATH_MAX_LENGTH",
    "check_burst",
    "check_cost",
    "check_key_arg",
    "check_log_size",
    "check_login_key",
    "check_path_start",
    "cidr_error",
    "parse_ban",
    "parse_cidrs",
    "parse_concurrency",
    "parse_identity_budget",
    "parse_lease",
    "parse_methods",
    "parse_path",
    "parse_policy_rates",
    "parse_tier_attribute",
    "policy_rates",
    "rates_text",
]

HTTP_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")
MAX_NETWORKS: Final = 1000
PATH_MAX_LENGTH: Final = 500
_SEPARATORS: Final = re.compile(r"[\s,]+")
_QUOTE_MAX: Final = 60
DEFAULT_LEASE: Final = 60
MAX_LEASE: Final = 86_400
LOG_MAX: Final = 10_000
"""The most a sliding log admits per window: it keeps a member per admitted unit of
cost, so an identity's memory, and what one costly request writes, grow with its limit."""
_CONCURRENT: Final = re.compile(r"\s*([0-9]{1,7})\s*(?:/\s*concurrent\s*)?", re.ASCII)


def _quote(text: str) -> str:
    return text if len(text) <= _QUOTE_MAX else text[: _QUOTE_MAX - 1] + "…"


def _shown(reason: Reason) -> StrOrPromise:
    """``reason`` in the language of whoever reads it: translated when the error is
    shown, not when it is raised (as the ``gettext_lazy`` lead it fills in)."""
    return _lazy_translate(reason, gettext)


_lazy_translate = lazy(Reason.translate, str)


def parse_policy_rates(text: str) -> tuple[Rate, ...]:
    try:
        return parse_rates(text)
    except RateParseError as exc:
        raise _rate_error(_("Enter rates such as “10/s, 120/m”: %(error)s"), "rates", exc) from None


def parse_concurrency(text: str) -> int:
    """A concurrency policy's rates: how many requests may be in flight at once,
    written ``5`` or ``5/concurrent``."""
    found = _CONCURRENT.fullmatch(text)
    slots = int(found.group(1)) if found else 0
    if not 1 <= slots <= MAX_LIMIT:
        raise ValidationError(
            _(
                "For a concurrency policy, enter how many requests may be in flight at "
                "once, from 1 to %(max)s, e.g. “5” or “5/concurrent”."
            ),
            code="invalid_concurrency",
            params={"max": MAX_LIMIT},
        )
    return slots


def parse_lease(algorithm: str, lease: int | None) -> int | None:
    """A concurrency policy's lease in seconds (empty: :data:`DEFAULT_LEASE`); None
    for other algorithms, which must leave it empty."""
    if algorithm != Algorithm.CONCURRENCY:
        if lease is not None:
            raise ValidationError(
                _("Only concurrency policies have a lease: leave it empty for this algorithm."),
                code="lease_unused",
            )
        return None
    if lease is None:
        return DEFAULT_LEASE
    if not 1 <= lease <= MAX_LEASE:
        raise ValidationError(
            _("The lease must be between 1 and %(max)s seconds."),
            code="lease_range",
            params={"max": MAX_LEASE},
        )
    return lease


def policy_rates(algorithm: str, text: str, lease: int | None) -> tuple[Rate, ...]:
    """The rates of a policy: its rates text parsed, or for a concurrency policy one
    rate of N slots held at most ``lease`` seconds each (see :func:`parse_lease`)."""
    if algorithm == Algorithm.CONCURRENCY:
        return (Rate(parse_concurrency(text), lease or DEFAULT_LEASE),)
    return parse_policy_rates(text)


def check_log_size(algorithm: str, rates: tuple[Rate, ...]) -> None:
    """A sliding log's rates admit at most :data:`LOG_MAX` per window. Asked where a
    policy is saved or declared, never where a saved one is loaded: a row saved before
    the bound is enforced as saved (check W014), not skipped."""
    if algorithm != Algorithm.SLIDING_LOG:
        return
    for rate in rates:
        if rate.limit > LOG_MAX:
            raise ValidationError(
                _(
                    "The sliding log keeps a member per request for each window, so it "
                    "admits at most %(max)s per window; %(rate)s admits more. Choose the "
                    "sliding window for such a rate."
                ),
                code="log_too_large",
                params={"max": LOG_MAX, "rate": str(rate)},
            )


def rates_text(algorithm: str, rates: tuple[Rate, ...]) -> str:
    """The rates field's canonical text for ``rates`` (``5/concurrent`` for concurrency)."""
    if algorithm == Algorithm.CONCURRENCY:
        return f"{rates[0].limit}/concurrent"
    return ", ".join(str(rate) for rate in rates)


def parse_tier_attribute(text: str) -> tuple[str, ...]:
    """A tier's attribute path (``profile.plan``), by :func:`parse_attribute_path`'s rule."""
    try:
        return parse_attribute_path(text)
    except AttributePathError as exc:
        raise ValidationError(
            _("Enter an attribute path such as “profile.plan”: %(error)s"),
            code="invalid_attribute",
            params={"error": _shown(exc.translatable)},
        ) from None


def parse_identity_budget(text: str) -> Rate | Literal["default", "off"]:
    """Empty: the ``IDENTITY_BUDGET`` setting; ``off``: no budget; else one rate."""
    text = text.strip()
    if not text:
        return "default"
    if text == "off":
        return "off"
    try:
        return parse_rate(text)
    except RateParseError as exc:
        message = _("Enter one rate such as “50/h”, “off”, or nothing for the default: %(error)s")
        raise _rate_error(message, "identity_budget", exc) from None


def _rate_error(message: StrOrPromise, field: str, error: RateParseError) -> ValidationError:
    """The form error for ``field``'s text that the rate grammar refused with ``error``."""
    return ValidationError(
        message, code=f"invalid_{field}", params={"error": _shown(error.translatable)}
    )


def check_burst(algorithm: str, rates: tuple[Rate, ...], burst: int | None) -> None:
    """A burst only for the token bucket and GCRA, and one every rate can hold
    (the rules are :func:`~django_ratelimits.engine.limits.burst_problem`'s)."""
    if burst is None:
        return
    for rate in rates:
        problem = burst_problem(algorithm, rate, burst)
        if problem is not None:
            raise ValidationError(
                _BURST_MESSAGES[problem],
                code=problem,
                params={"burst": burst, "rate": str(rate), "max": MAX_BURST},
            )


_BURST_MESSAGES: Final = {
    "burst_unused": _(
        "Only the token bucket and GCRA have a burst: leave it empty for this algorithm."
    ),
    "burst_range": _("The burst must be between 1 and %(max)s."),
    "burst_too_large": _("A burst of %(burst)s is too large for %(rate)s."),
}


def check_cost(
    cost: int | None, algorithm: str, rates: tuple[Rate, ...], burst: int | None
) -> None:
    """A cost from 1 to ``MAX_COST`` that every rate can hold (a request costing more
    than a rate allows could never pass); the rules are
    :func:`~django_ratelimits.policies.spec.cost_problem`'s."""
    if cost is None:  # the field's own "required" error
        return
    for rate in rates:
        problem = cost_problem(cost, [Limit("cost", rate, Algorithm(algorithm), burst)])
        if problem is not None:
            raise ValidationError(
                _COST_MESSAGES[problem],
                code=problem,
                params={"cost": cost, "rate": str(rate), "max": MAX_COST},
            )


_COST_MESSAGES: Final = {
    "cost_range": _("The cost must be a whole number from 1 to %(max)s."),
    "cost_capacity": _(
        "A request costing %(cost)s could never pass %(rate)s: lower the cost or raise the rate."
    ),
}


def parse_ban(after: int | None, within: str, duration: str, maximum: str) -> Ban | None:
    """A policy's escalating ban from its four fields, or None when ``after`` is 0 (off).

    ``within``, ``duration`` and ``maximum`` are periods as a rate writes them
    (``"10m"``, ``"1h"``, ``"7d"``); an empty ``maximum`` is ``duration`` (no
    doubling). The bounds are :func:`~django_ratelimits.engine.limits.ban_problem`'s.
    Raises a ``ValidationError`` whose errors are keyed by field
    (``ban_after``, ``ban_within``, ``ban_for``, ``ban_max``).
    """
    errors: dict[str, ValidationError] = {}
    seconds: dict[str, int] = {}
    for field, text in (("ban_within", within), ("ban_for", duration), ("ban_max", maximum)):
        if not text.strip():
            continue
        try:
            seconds[field] = parse_period(text)
        except RateParseError as exc:
            message = _("Enter a duration such as “10m”, “1h” or “7d”: %(error)s")
            errors[field] = ValidationError(
                message, code=f"invalid_{field}", params={"error": _shown(exc.why)}
            )
    if after:
        for field in ("ban_within", "ban_for"):
            if field not in seconds and field not in errors:
                errors[field] = ValidationError(_BAN_MESSAGES["required"], code="ban_required")
    if errors:
        raise ValidationError(errors)
    if not after:
        return None
    values = (
        after,
        seconds["ban_within"],
        seconds["ban_for"],
        seconds.get("ban_max", seconds["ban_for"]),
    )
    problem = ban_problem(*values)
    if problem is not None:
        field = "ban_max" if problem == "ban_max_short" else problem
        params = {"max": MAX_BAN_AFTER, "longest": format_period(MAX_BAN_SECONDS)}
        raise ValidationError(
            {field: ValidationError(_BAN_MESSAGES[problem], code=problem, params=params)}
        )
    return Ban(*values)


_BAN_MESSAGES: Final = {
    "required": _("Required when the policy bans (ban after is not 0)."),
    "ban_after": _("Ban after 0 (no ban) to %(max)s denials."),
    "ban_within": _("The denials are counted within 1s to %(longest)s."),
    "ban_for": _("A ban lasts 1s to %(longest)s."),
    "ban_max": _("The longest ban is 1s to %(longest)s."),
    "ban_max_short": _("The longest ban cannot be shorter than the first (ban for)."),
}


def parse_path(text: str) -> PathPattern | None:
    """The pattern compiled by RE2, which refuses what it cannot match in linear time;
    its length is capped by the field (``PATH_MAX_LENGTH``)."""
    if not text:
        return None
    try:
        text.encode()
    except UnicodeEncodeError:  # PathPattern's own English would pass for RE2's below
        raise ValidationError(_("The pattern is not valid Unicode."), code="path_unicode") from None
    try:
        return PathPattern(text)
    except PatternError as exc:
        raise ValidationError(
            _(
                # Translators: %(error)s is RE2's own message, which comes from the
                # library in English whatever the language: say so if yours is not English.
                "Not a regular expression the linear-time matcher (RE2) can run. "
                "RE2 says: “%(error)s”. Backreferences, lookarounds, (?#...) comments "
                "and \\Z are not supported (write \\z for the end of the path)."
            ),
            code="path_regex",
            params={"error": _quote(str(exc))},
        ) from None


def check_path_start(text: str) -> None:
    """Refuse a pattern anchored at the start on text other than ``/`` (``^api/``, as
    Django's routes are written): every path it is searched in starts with ``/``, so it
    limits no request by path. Admin refuses it (:meth:`Policy.clean`) and W013 names a
    row saved before; a row that has one still loads (a view decorated with its name is
    limited by it), so this is not part of :func:`parse_path`."""
    prefix = literal_prefix(text) if text else ""
    if prefix and not prefix.startswith("/"):
        anchor = 1 if text.startswith("^") else 2
        raise ValidationError(
            _(
                "Every request path starts with “/”, so a pattern anchored at the start "
                "must too: this one limits no request. Write %(fixed)s."
            ),
            code="path_slash",
            params={"fixed": _quote(text[:anchor] + "/" + text[anchor:])},
        )


def parse_methods(text: str) -> frozenset[str]:
    """Comma- or space-separated method names, any case; empty means every method."""
    names = [name for name in _SEPARATORS.split(text.upper()) if name]
    unknown = [name for name in names if name not in HTTP_METHODS]
    if unknown:
        raise ValidationError(
            _("Unknown HTTP method: %(unknown)s. Use %(known)s."),
            code="methods",
            params={"unknown": _quote(", ".join(unknown)), "known": ", ".join(HTTP_METHODS)},
        )
    return frozenset(names)


def parse_cidrs(text: str) -> tuple[IPNetwork, ...]:
    """Addresses and networks, one per line or comma-separated, without duplicates; an
    IPv4-mapped one as its IPv4 network, which is what mapped clients are matched as."""
    items = [item for item in _SEPARATORS.split(text) if item]
    if len(items) > MAX_NETWORKS:
        raise ValidationError(
            _("At most %(max)s networks."), code="cidrs_count", params={"max": MAX_NETWORKS}
        )
    networks: dict[IPNetwork, None] = {}
    for item in items:
        try:
            networks[ip_network(item)] = None
        except ValueError:
            raise cidr_error(item) from None
    return tuple(networks)


def cidr_error(item: str) -> ValidationError:
    """The error for ``item``, which ``ip_network`` refused: host bits set, or not a network."""
    try:
        network = ipaddress.ip_network(item, strict=False)
    except ValueError:
        return ValidationError(
            _("“%(item)s” is not an IP address or network such as 10.0.0.0/8."),
            code="cidr",
            params={"item": _quote(item)},
        )
    return ValidationError(
        _("“%(item)s” has host bits set: did you mean %(network)s?"),
        code="cidr_host_bits",
        params={"item": item, "network": str(network)},
    )


def check_key_arg(kind: str, arg: str, saving: bool) -> None:
    """The header name or dotted path that ``kind`` needs, and nothing for the others.

    When ``saving`` (admin), a dotted path must also be one of the allowed key
    functions (:mod:`django_ratelimits.key_functions`), checked before anything
    is imported, and import to a callable. Compiling a saved row checks the
    text only: a row naming a function no longer allowed still compiles, and
    counts by client IP (see :func:`django_ratelimits.identity.identities`).
    """
    if kind == KeyKind.HEADER:
        if not HEADER_NAME.fullmatch(arg):
            raise ValidationError(
                _(
                    "Enter the header to count by: 1 to 64 letters, digits and hyphens, "
                    "e.g. X-Api-Key."
                ),
                code="header",
            )
    elif kind == KeyKind.CALLABLE:
        if not DOTTED_PATH.fullmatch(arg) or any(keyword.iskeyword(p) for p in arg.split(".")):
            raise ValidationError(
                _("Enter the dotted path of a function(request), e.g. myproject.keys.tenant."),
                code="callable_path",
            )
        if saving:
            _check_allowed(arg)
            _check_importable(arg)
    elif arg:
        raise ValidationError(
            _("Leave this empty: only “a request header” and “a callable” take an argument."),
            code="key_arg_unused",
        )


def check_login_key(counts: str, key: str) -> None:
    """A failed-login policy counts by client IP and/or the username tried; only it
    knows a username."""
    if counts == Counts.FAILED_LOGINS:
        if key not in LOGIN_KEYS:
            raise ValidationError(
                _("A failed-login policy counts by client IP, the username tried, or both."),
                code="login_key",
            )
    elif key in LOGIN_KEYS and key != KeyKind.IP:
        raise ValidationError(
            _("Only a policy that counts failed logins knows the username tried."),
            code="username_needs_logins",
        )


def _check_allowed(path: str) -> None:
    if key_functions.is_allowed(path):
        return
    choices = key_functions.allowed()
    if not choices:
        raise ValidationError(
            _(
                "This site allows no key functions: a developer must list them in "
                "DJANGO_RATELIMITS[“KEY_FUNCTIONS”] first."
            ),
            code="callable_not_allowed",
        )
    raise ValidationError(
        _("%(path)s is not one of the key functions this site allows: %(choices)s."),
        code="callable_not_allowed",
        params={"path": _quote(path), "choices": ", ".join(choices)},
    )


def _check_importable(path: str) -> None:
    try:
        target = import_string(path)
    except Exception as exc:  # a module's import can raise anything; admin shows it
        raise ValidationError(
            _("Cannot import %(path)s: %(error)s"),
            code="callable_import",
            params={"path": path, "error": _quote(str(exc))},
        ) from None
    if not callable(target):
        raise ValidationError(
            _("%(path)s is not callable."), code="callable_type", params={"path": path}
        )
