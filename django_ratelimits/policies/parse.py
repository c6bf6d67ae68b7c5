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
from django.utils.module_loading import import_string
from django.utils.translation import gettext_lazy as _

from django_ratelimits import key_functions
from django_ratelimits.conf import DOTTED_PATH, HEADER_NAME, IPNetwork
from django_ratelimits.engine.limits import MAX_BURST, burst_problem
from django_ratelimits.errors import RateParseError
from django_ratelimits.policies.matching import PathPattern, PatternError
from django_ratelimits.policies.spec import KeyKind
from django_ratelimits.policies.tiers import parse_attribute_path
from django_ratelimits.rates import Rate, parse_rate, parse_rates

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as StrOrPromise

__all__ = [
    "HTTP_METHODS",
    "MAX_NETWORKS",
    "PATH_MAX_LENGTH",
    "check_burst",
    "check_key_arg",
    "parse_cidrs",
    "parse_identity_budget",
    "parse_methods",
    "parse_path",
    "parse_policy_rates",
    "parse_tier_attribute",
]

HTTP_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")
MAX_NETWORKS: Final = 1000
PATH_MAX_LENGTH: Final = 500
_SEPARATORS: Final = re.compile(r"[\s,]+")
_QUOTE_MAX: Final = 60


def _quote(text: str) -> str:
    return text if len(text) <= _QUOTE_MAX else text[: _QUOTE_MAX - 1] + "…"


def parse_policy_rates(text: str) -> tuple[Rate, ...]:
    try:
        return parse_rates(text)
    except RateParseError as exc:
        raise _rate_error(_("Enter rates such as “10/s, 120/m”: %(error)s"), "rates", exc) from None


def parse_tier_attribute(text: str) -> tuple[str, ...]:
    """A tier's attribute path (``profile.plan``), by :func:`parse_attribute_path`'s rule."""
    try:
        return parse_attribute_path(text)
    except ValueError as exc:
        raise ValidationError(
            _("Enter an attribute path such as “profile.plan”: %(error)s"),
            code="invalid_attribute",
            params={"error": exc},
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
    return ValidationError(message, code=f"invalid_{field}", params={"error": error})


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


def parse_path(text: str) -> PathPattern | None:
    """The pattern compiled by RE2, which refuses what it cannot match in linear time;
    its length is capped by the field (``PATH_MAX_LENGTH``)."""
    if not text:
        return None
    try:
        return PathPattern(text)
    except PatternError as exc:
        raise ValidationError(
            _(
                "Not a regular expression the linear-time matcher (RE2) can run: %(error)s. "
                "Backreferences, lookarounds, (?#...) comments and \\Z are not supported "
                "(write \\z for the end of the path)."
            ),
            code="path_regex",
            params={"error": _quote(str(exc))},
        ) from None


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
    """Addresses and networks, one per line or comma-separated, without duplicates."""
    items = [item for item in _SEPARATORS.split(text) if item]
    if len(items) > MAX_NETWORKS:
        raise ValidationError(
            _("At most %(max)s networks."), code="cidrs_count", params={"max": MAX_NETWORKS}
        )
    networks: dict[IPNetwork, None] = {}
    for item in items:
        try:
            networks[ipaddress.ip_network(item)] = None
        except ValueError:
            raise _cidr_error(item) from None
    return tuple(networks)


def _cidr_error(item: str) -> ValidationError:
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
