"""Checks of the policies that code names and the policy table holds
(E005, E006, E008, W004, W013, W014, W015).

Each reads the policies' database through :func:`_rows`: a table that cannot
be read yet (not migrated, no database, no access) has no rows to judge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ValidationError
from django.db import router
from django.urls import get_resolver

from django_ratelimits import key_functions
from django_ratelimits.checks.common import TAG, valid_settings
from django_ratelimits.checks.references import references
from django_ratelimits.conf import SETTING_NAME
from django_ratelimits.engine import Algorithm
from django_ratelimits.errors import RateParseError
from django_ratelimits.models import Policy
from django_ratelimits.policies.parse import LOG_MAX, check_path_start, parse_path
from django_ratelimits.policies.registry import get_registry
from django_ratelimits.policies.spec import KeyKind
from django_ratelimits.rates import parse_rates
from django_ratelimits.resolved import LanguageInPattern, language_in_pattern

_T = TypeVar("_T")


def _rows(query: Iterable[_T]) -> tuple[list[_T], Exception | None]:
    """What ``query`` (a lazy queryset) reads, or nothing and why it could not."""
    try:
        return list(query), None
    except Exception as error:  # no table yet, no database, no access...
        return [], error


@register(TAG)
def check_policy_names(**kwargs: Any) -> list[CheckMessage]:
    """E006: ``@ratelimit("name")`` or a ``PolicyThrottle`` naming no policy limits nothing;
    W004 when the policy table cannot be read to tell.

    A name is known when a decorator declared it with ``rate=`` or a row has it
    (enabled or not). Rows are read only when some name has no declaration.
    """
    named = references()  # a broken URLconf raises, as in Django's own URL checks
    registry = get_registry()
    undeclared = {ref.name for ref in named if not registry.knows(ref.name)}
    if not undeclared:
        return []
    rows, error = _rows(Policy.objects.filter(name__in=undeclared).values_list("name", flat=True))
    if error is not None:
        return [
            Warning(
                f"Cannot read the rate-limit policy table to tell whether these policies "
                f"exist: {', '.join(sorted(undeclared))} ({type(error).__name__}: {error}).",
                hint="Run 'manage.py migrate', or check the database settings. Until the "
                "policies exist, the code that names them limits nothing.",
                id="django_ratelimits.W004",
            )
        ]
    return [
        Error(
            f"{ref.where} names the rate-limit policy {ref.name!r}, which does not exist: "
            "it limits nothing.",
            hint="Create the policy in admin, give @ratelimit a rate= default that creates "
            "it, or correct the name.",
            obj=ref.where,
            id="django_ratelimits.E006",
        )
        for ref in named
        if ref.name in undeclared.difference(rows)
    ]


@register(TAG)
def check_path_patterns(
    databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Rows saved before patterns were matched by RE2 may hold one it refuses.

    Such a row is skipped at run time (the registry logs it at each reload),
    so no request is limited by it: each is an error here, by name. A row saved
    before admin refused a start-anchored pattern without ``/`` (``^api/``) is
    loaded, and its path matches no request: W013. A pattern that starts with a language
    prefix (``^/en/login/``) on a site that serves pages under every language's prefix
    limits the page in that language alone: W015. Plain
    ``manage.py check`` reads the database the policies are read from, as E006
    does; ``databases`` (``migrate``, ``check --database``) names others. A
    database that cannot be read yet (before ``migrate``) has no rows to judge.
    """
    found: list[CheckMessage] = []
    for alias in databases if databases is not None else [router.db_for_read(Policy)]:
        if not router.allow_migrate_model(alias, Policy):
            continue
        rows, _ = _rows(Policy.objects.using(alias).exclude(path="").values_list("name", "path"))
        for name, path in rows:
            try:
                parse_path(path)
            except ValidationError as error:
                found.append(_refused_pattern(name, path, error))
                continue
            try:
                check_path_start(path)
            except ValidationError as error:
                found.append(_pattern_without_slash(name, path, error))
                continue
            if (language := language_in_pattern(path)) is not None:
                found.append(_pattern_of_one_language(name, path, language))
    return found


def _pattern_of_one_language(name: str, path: str, language: LanguageInPattern) -> Warning:
    fix = (
        f"write {language.fixed!r} in admin"
        if language.fixed
        else f"write the pattern without {language.prefix!r} in admin"
    )
    return Warning(
        f"Rate-limit policy {name!r} has the path pattern {path!r}, which starts with the "
        f"language prefix {language.prefix!r}: the site serves its pages under every "
        "language's prefix (i18n_patterns), and the policy limits the page in that "
        "language alone.",
        hint=f"To limit the page in every language, {fix}: a path pattern is also searched "
        "in the path without its language prefix. Silence this check if the policy is "
        "meant for one language.",
        obj=f"policy {name!r}",
        id="django_ratelimits.W015",
    )


def _pattern_without_slash(name: str, path: str, error: ValidationError) -> Warning:
    return Warning(
        f"Rate-limit policy {name!r} has the path pattern {path!r}, which matches no "
        f"request: {' '.join(error.messages)} Its path limits nothing (a view decorated "
        "with its name is still limited by it).",
        hint="Add the leading / in admin.",
        obj=f"policy {name!r}",
        id="django_ratelimits.W013",
    )


def _refused_pattern(name: str, path: str, error: ValidationError) -> Error:
    return Error(
        f"Rate-limit policy {name!r} has the path pattern {path!r}, which the linear-time "
        f"matcher refuses: {' '.join(error.messages)} While enabled, the policy is skipped: its "
        "path limits no request, and a view decorated with its name gets the default "
        "declared in code.",
        hint="Rewrite the pattern in RE2 syntax in admin (or disable the policy); "
        "see docs/policies.md, 'Path patterns'.",
        obj=f"policy {name!r}",
        id="django_ratelimits.E005",
    )


@register(TAG)
def check_key_functions(
    *, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Every policy row whose key function is not allowed: it is never called.

    Reads the policies' database as E005 and E006 do, in a plain ``manage.py
    check`` too; a database that cannot be read yet has no rows to judge.
    """
    if valid_settings() is None:
        return []
    _import_urlconf()
    rows, _ = _rows(Policy.objects.filter(key=KeyKind.CALLABLE).order_by("name"))
    return [
        Error(
            f"Rate-limit policy {row.name!r} names the key function {row.key_arg!r}, which "
            f"{SETTING_NAME}['KEY_FUNCTIONS'] does not list and no @ratelimit names: it is "
            "never called, and the policy counts by client IP instead.",
            hint=f"If the function is meant to count requests, add it to "
            f"{SETTING_NAME}['KEY_FUNCTIONS']; otherwise choose an allowed one in admin.",
            obj=row,
            id="django_ratelimits.E008",
        )
        for row in rows
        if not key_functions.is_allowed(row.key_arg)
    ]


def _import_urlconf() -> None:
    """Import ``ROOT_URLCONF``, so every ``@ratelimit`` has named its key function."""
    try:
        get_resolver().url_patterns  # noqa: B018  (imports the URLconf modules)
    except Exception:  # a broken URLconf is Django's own check's to report
        return


@register(TAG)
def check_sliding_log_sizes(**kwargs: Any) -> list[CheckMessage]:
    """W014: a sliding-log policy row saved with a rate over :data:`LOG_MAX` per window,
    before admin refused one. It is enforced as saved, but each identity's log holds a
    member per admitted request (per unit of cost) of the window: memory, and what one
    costly request writes, grow with the limit."""
    rows, _ = _rows(Policy.objects.filter(algorithm=Algorithm.SLIDING_LOG).order_by("name"))
    found: list[CheckMessage] = []
    for row in rows:
        try:
            rates = parse_rates(row.rates)
        except RateParseError:  # the registry logs and skips it
            continue
        if any(rate.limit > LOG_MAX for rate in rates):
            found.append(
                Warning(
                    f"Rate-limit policy {row.name!r} keeps a sliding log at {row.rates}: up "
                    f"to that many members per identity and window, where admin now "
                    f"accepts at most {LOG_MAX:,} per window.",
                    hint="Choose the sliding window (exact to within a tenth of the window, "
                    "O(1) memory) or a smaller rate in admin; the policy is enforced as "
                    "saved meanwhile.",
                    obj=row,
                    id="django_ratelimits.W014",
                )
            )
    return found
