"""Failed-login lockouts: policies that count failed logins, by client IP and/or username.

A policy whose ``counts`` is :attr:`~django_ratelimits.policies.spec.Counts.FAILED_LOGINS`
is never counted by the middleware. Instead:

* :class:`FailedLoginBackend`, first in ``AUTHENTICATION_BACKENDS``, checks the
  login's IP and username tried against those policies before any backend
  checks the password: one engine call in peek mode (nothing charged). Over the
  limit, it raises :class:`~django_ratelimits.decide.RateLimited`, which the
  middleware answers with 429 and ``Retry-After``; the same call recorded the
  refusal for the offender dashboard, under the identities over the limit only. A
  refusal the worker's cache of denials makes (:mod:`django_ratelimits.deny_cache`:
  an identity already over its limit) costs no call; the cache counts it.
* Logins in flight count too: the look reserves the attempt's place beside the
  failures (:attr:`~django_ratelimits.engine.Check.reserve`, ``lua/attempts.lua``), so
  logins sent together test no more passwords than the limit. The place is given back
  when the response ends (the middleware), or a minute after the look.
* Django's ``user_login_failed`` signal charges the failed attempt: one engine
  call in check mode, for the request the signal carries, which turns its place into
  its failure. It refuses nothing, so sends no ``rate_limited``: a login is signalled
  once, by its look, when that refuses it (or would, in shadow mode).
* ``user_logged_in`` clears the counters of policies with ``reset_on_success``: the
  username's and the (IP, username) pair's, never the IP's; only when the account
  signed in is the one account the counted name names (:func:`_counts_only`).

A policy's path pattern, when it has one, names the login URLs it guards (under any
language prefix, on a site with ``i18n_patterns``); ``authenticate()`` without a
request counts nothing. Sync and async
(``aauthenticate``) alike; DRF's request is unwrapped. ``docs/logins.md``
tells how to set it up and how django-axes and django-defender map onto it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import sys
import unicodedata
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, Final

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.db.models import Q
from django.http import HttpRequest

from django_ratelimits.decide import Planned, RateLimited, Verdict, aprepare
from django_ratelimits.engine import Check, Decision, Identity, Limit, get_engine
from django_ratelimits.engine.concurrency import Held, request_id
from django_ratelimits.engine.controls import Controls
from django_ratelimits.engine.errors import BackendError
from django_ratelimits.engine.hits import username_behind
from django_ratelimits.identity import (
    USERNAME_MAX,
    identities,
    login_username,
    normalize_username,
    set_login_username,
)
from django_ratelimits.policies.registry import PolicyRegistry, acurrent, current
from django_ratelimits.policies.spec import PolicySpec
from django_ratelimits.resolved import unprefixed

__all__ = ["BACKEND", "FailedLoginBackend", "logged_in", "login_failed"]

logger = logging.getLogger("django_ratelimits")

BACKEND: Final = "django_ratelimits.logins.FailedLoginBackend"

RESET_KINDS: Final = frozenset({"username", "ip_username"})
"""The identities a successful login clears: those that name the user who proved the
password. Never the client IP alone, which others share and an attacker can log in
from to his own account: clearing it would clear the failures (and the ban level) his
guesses at other accounts earned."""


class FailedLoginBackend:
    """Refuses a login over a failed-login policy's limit before its password is
    checked; authenticates nobody. List it first in ``AUTHENTICATION_BACKENDS``.

    It has no ``get_user``: no session can name it, and the test client's
    ``force_login`` passes it by.
    """

    def authenticate(self, request: Any, **credentials: Any) -> None:
        planned = _planned(current(), request, _tried(credentials))
        if planned is None:
            return
        engine, token = get_engine(), _token(planned.request)
        verdict = planned.run(
            lambda checks: engine.peek(_reserving(checks), cost=1, token=token),
            charge=False,
            counted=True,
        )
        if (back := _hold(planned, verdict, token)) is not None:
            # If Redis fails here, its response's end gives them back, or the lease.
            with contextlib.suppress(BackendError):
                engine.release(back)
        if verdict.blocked():
            raise RateLimited(verdict)

    async def aauthenticate(self, request: Any, **credentials: Any) -> None:
        registry, http = await acurrent(), _http(request)
        if http is not None:  # what planning would read from the database, read here
            await aprepare(http, _applying(registry, http))
        planned = _planned(registry, request, _tried(credentials))
        if planned is None:
            return
        engine, token = get_engine(), _token(planned.request)
        try:
            verdict = await planned.arun(
                lambda checks: engine.apeek(_reserving(checks), cost=1, token=token),
                charge=False,
                counted=True,
            )
        except BaseException:
            # Cancelled (on ASGI, the client went away), or a signal's receiver raised:
            # the look may have taken places, and its verdict, which says so, is lost.
            # (Cancelled during the look's call, the engine gave them back once the call
            # ended.) A place not taken is left alone.
            if (places := _places_of(planned, token)).keys:
                await engine.arelease_shielded([places])
            raise
        if (back := _hold(planned, verdict, token)) is not None:
            # Marked released as it starts: should the login be cancelled meanwhile, the
            # release goes on (a Redis failure is logged; their lease frees them then).
            await engine.arelease_shielded([back])
        if verdict.blocked():
            raise RateLimited(verdict)


#: The request's attribute holding the places its logins' looks took among the logins in
#: flight (``Held``, also in ``request.ratelimit``), each under the request's one id.
_PLACES: Final = "_ratelimits_login_places"


def _places(request: HttpRequest) -> tuple[Held, ...]:
    places: tuple[Held, ...] = getattr(request, _PLACES, ())
    return places


def _token(request: HttpRequest) -> bytes:
    """The id of ``request``'s places among the logins in flight: that of the places an
    earlier look took (a view may call ``authenticate()`` twice), else a new one."""
    places = _places(request)
    return places[0].token if places else request_id()


def _reserving(checks: list[Check]) -> list[Check]:
    """``checks`` counting the logins in flight beside the failures: the enforced ones
    (a shadow policy refuses nothing, so keeps no place)."""
    return [check if check.shadow else replace(check, reserve=True) for check in checks]


def _hold(planned: Planned, verdict: Verdict, token: bytes) -> Held | None:
    """Notes the places a login's look may have taken: given back when its response
    ends, as they join the request's verdict (``request.ratelimit``), whose concurrency
    slots the middleware gives back then. A failure takes its place first
    (``login_failed``); without the middleware, a place lasts its lease, a minute.

    Returns the places to give back at once, None if there are none. A look takes none
    when it made no engine call, or when one call refused it (it takes a place in every
    identity of a call or in none). On a cluster, where a login's identities may live on
    several nodes, a refused login may hold places on the others: the backend gives
    them back at once."""
    decision = verdict.decision
    refused = verdict.blocked()
    if decision is None or verdict.cached or (refused and not get_engine().cluster):
        return None
    held = _places_of(planned, token)
    request = planned.request
    before: Verdict = getattr(request, "ratelimit", None) or Verdict(())
    request.ratelimit = before.merge(Verdict((), Decision((), decision.now_us, (held,))))  # type: ignore[attr-defined]
    setattr(request, _PLACES, (*_places(request), held))
    return held if refused else None


def _places_of(planned: Planned, token: bytes) -> Held:
    """The places a login's look may take among the logins in flight, under ``token``:
    one per identity its enforced checks count (a gate's client IP too)."""
    keys = get_engine().keys
    places = dict.fromkeys(
        keys.of(who).attempts
        for check in planned.checks
        if not check.shadow
        for who in (check.identity, *((check.gate.client,) if check.gate else ()))
    )
    return Held(token, tuple(places))


def login_failed(
    sender: object, credentials: Mapping[str, Any], request: Any = None, **_: Any
) -> None:
    """``user_login_failed``: charge the failed attempt to the failed-login policies."""
    # The attempt was decided once, by the backend's look before the password: this
    # charge is no second decision, for the metrics nor for ``rate_limited``. It refuses
    # nothing (the password was checked, and failed): its denial, a failure over the
    # limit, is no refusal; the look that would refuse the next login signals that one.
    tried = _tried_after_failure(request, credentials)
    planned = _planned(current(), request, tried, charge=True)
    if planned is None:
        return
    _warn_without_backend()
    # A failure its look let through is counted by Redis, whatever the worker's cache of
    # denials learnt since (a login refused for the attempts in flight, this one among
    # them): it takes the place the look reserved.
    places, engine = _places(planned.request), get_engine()
    if not places:  # no look took a place (no FailedLoginBackend, or Redis failed)
        planned.run(engine.check, cached=False)
    else:
        token = places[0].token
        verdict = planned.run(
            lambda checks: engine.check(_reserving(checks), token=token), cached=False
        )
        # The charge gave back every place of the one look it follows, in the groups it
        # ran or skipped (a gate that now counts the address): none is left to give back
        # when the response ends. On a cluster a gated username's group in another slot
        # is not sent once its gate refuses; and a request that looked twice may have
        # looked at other identities: the response's end gives those back.
        if verdict.decision is not None and len(places) == 1 and not engine.cluster:
            places[0].released = True


def logged_in(sender: object, request: Any = None, user: Any = None, **_: Any) -> None:
    """``user_logged_in``: clear the counters of the policies with ``reset_on_success``
    that name the user who logged in (:data:`RESET_KINDS`), never the client IP's."""
    request = _http(request)
    if request is None:
        return
    registry = current()
    specs = tuple(spec for spec in _applying(registry, request) if spec.reset_on_success)
    if not specs:
        return
    if login_username(request) is None and user is not None:
        set_login_username(request, user.get_username())
    if not _counts_only(user, login_username(request)):
        return
    limits: dict[Identity, list[Limit]] = {}
    for spec in specs:
        for identity in identities(request, spec):
            if identity.kind in RESET_KINDS:
                limits.setdefault(identity, []).extend(registry.every_limit(spec, identity))
    controls = Controls(get_engine())
    try:
        for identity, its_limits in limits.items():
            controls.reset(identity, its_limits)
    except BackendError as error:  # the login succeeded; only the reset is lost
        logger.warning("could not reset failed-login counters after a login: %s", error)


def _counts_only(user: Any, counted: str | None) -> bool:
    """Whether the username ``counted`` (normalised) counts ``user``'s logins alone, so
    that its success may clear what it counted.

    Normalising folds distinct usernames into one counter (``Alice`` and ``alice``;
    ``straße`` and ``strasse``): a success of one account must not clear the failures
    guessed against another (an attacker's own account whose name folds to his
    victim's). So the account's username must be counted as ``counted``
    (``Alice@Example.com`` for ``alice@example.com``, ``Strauß`` for ``strauss``:
    :func:`_counted_as`), and no other account's username may fold to it, by case or by
    more (``strauß`` beside ``strauss``): one query on a login at most
    (:func:`_shared`). ``docs/logins.md`` says what it does not find."""
    if user is None or counted is None or not _counted_as(user.get_username(), counted):
        return False
    return not _shared(type(user), user.pk, counted)


def _counted_as(username: object, counted: str) -> bool:
    """Whether ``username`` (an account's, as stored) is counted as ``counted``: a
    success names the count of the account that signed in, not of a name typed that
    signs in another (a backend that takes an e-mail address for a username). Whether
    that count is the account's alone is :func:`_shared`'s to say."""
    return isinstance(username, str) and normalize_username(username) == counted


def _shared(model: Any, pk: Any, counted: str) -> bool:
    """Whether an account other than ``pk`` has a username that folds to ``counted``.

    One query looks for each spelling of ``counted`` (:func:`_spellings`: ``strauss``,
    ``strauß``, ``strauẞ``) but for case (``iexact``), and those found are normalised
    here. SQLite compares the case of ASCII letters only (``Élise`` and ``élise`` pass
    ``iexact`` by), so for a name that is not ASCII the same query also looks for each
    spelling with each other letter any one character (``iregex``). A name with more
    spellings than :data:`_SPELLINGS_MAX` (then no query is made), or matching more
    than :data:`_CANDIDATES_MAX` accounts, is taken as shared, so its success clears
    nothing; so is a name of :data:`~django_ratelimits.identity.USERNAME_MAX`
    characters, which may be a longer one's cut short (``ß`` in a 254-character e-mail
    address folds to 255)."""
    spellings = None if len(counted) >= USERNAME_MAX else _spellings(counted)
    if spellings is None:
        return True
    field = model.USERNAME_FIELD
    others = model._default_manager.exclude(pk=pk)
    looked = Q()
    for spelling in spellings:
        looked |= Q(**{f"{field}__iexact": spelling})
    # An ASCII name needs no more: what a spelling holds that is not ASCII is a folding
    # character, and each one (ß and ẞ alike) has its own spelling.
    if not counted.isascii() and connections[others.db].vendor == "sqlite":
        patterns = dict.fromkeys(
            "".join(re.escape(c) if c.isascii() else "." for c in spelling)
            for spelling in spellings
        )
        looked |= Q(**{f"{field}__iregex": f"^(?:{'|'.join(patterns)})$"})
    names = list(others.filter(looked).values_list(field, flat=True)[: _CANDIDATES_MAX + 1])
    # A name of few ASCII letters matches many: past the bound, assume one is shared
    # (no reset) rather than read every account of that length on each login.
    return len(names) > _CANDIDATES_MAX or any(
        normalize_username(name) == counted for name in names
    )


#: How many accounts whose username may fold to the counted name (:func:`_shared`)
#: one login reads at most.
_CANDIDATES_MAX: Final = 100

#: How many spellings of the counted name (:func:`_spellings`) one login looks for at
#: most: ``ss`` three times (27), a Greek sigma six times (64).
_SPELLINGS_MAX: Final = 64


def _spellings(counted: str) -> list[str] | None:
    """The texts that fold to ``counted`` but for case, as an account may store them:
    ``counted`` itself, and each with some of its runs that a character folds to by more
    than case (:func:`_folds`) written with that character (``strauss``: ``strauß`` and
    ``strauẞ``). None if there are more than :data:`_SPELLINGS_MAX`: ``ss`` a hundred
    times has more spellings than can be looked for, so they are counted first, from the
    end (each position's count capped), and enumerated only under the bound.

    The runs are looked for in ``counted`` decomposed (NFD), and each spelling is
    composed again (NFKC, as Django stores a username): a folding character followed by
    a combining mark folds to a text that NFKC composes with the mark (``straß`` and a
    combining acute to ``strasś``), so ``strasś`` holds no ``ss`` to find until its
    ``ś`` is ``s`` and the acute."""
    starts = _fold_starts()
    decomposed = unicodedata.normalize("NFD", counted)
    size = len(decomposed)
    longest = max((len(text) for texts in starts.values() for text, _ in texts), default=1)
    # ways[i]: what may stand for decomposed[i:]'s start, and the position after it
    ways: list[list[tuple[str, int]]] = []
    for i, char in enumerate(decomposed):
        here = [(char, i + 1)]
        for folded, chars in starts.get(char, ()):
            if decomposed.startswith(folded, i):
                here.extend((by, i + len(folded)) for by in chars)
        ways.append(here)
    count = [0] * size + [1]
    for i in reversed(range(size)):
        count[i] = min(sum(count[after] for _, after in ways[i]), _SPELLINGS_MAX + 1)
    if count[0] > _SPELLINGS_MAX:
        return None
    # Each position's spellings from its end; those past the longest fold are let go.
    ends: dict[int, list[str]] = {size: [""]}
    for i in reversed(range(size)):
        ends[i] = [by + end for by, after in ways[i] for end in ends[after]]
        ends.pop(i + longest, None)
    return list(dict.fromkeys(unicodedata.normalize("NFKC", text) for text in ends[0]))


@functools.cache
def _folds() -> dict[str, tuple[str, ...]]:
    """The characters that :func:`~django_ratelimits.identity.normalize_username` folds
    by more than case, by what they fold to: ``ss`` for ``ß`` and ``ẞ``, the sigma for the final
    sigma, ``i̇`` for ``İ`` (whose lower case is two characters), Cherokee small letters to the
    capitals. Only those an account can store: NFKC leaves them be, as Django's
    ``normalize_username`` does for a username (no full-width letters, ligatures or
    Kelvin signs, which NFKC folds first); white space folds to nothing and is left out.

    Built once a process, from every code point (249 characters under 134 texts on
    Python 3.11's Unicode 14; about 0.1 s): a block whose case folding is its lower case,
    one character each, and stays so under NFKC, holds none, so only the others are
    looked at one by one."""
    found: dict[str, list[str]] = {}
    for block in _code_points():
        lower = block.lower()
        if (
            len(lower) == len(block)
            and block.casefold() == lower
            and unicodedata.is_normalized("NFKC", lower)
        ):
            continue
        for char in block:
            if unicodedata.normalize("NFKC", char) != char:
                continue
            folded, lower = normalize_username(char), char.lower()
            if folded is not None and (folded != lower or len(lower) != 1):
                found.setdefault(folded, []).append(char)
    return {folded: tuple(chars) for folded, chars in found.items()}


@functools.cache
def _fold_starts() -> dict[str, tuple[tuple[str, tuple[str, ...]], ...]]:
    """The texts of :func:`_folds` decomposed (NFD), each with the characters that fold
    to it, by their first character."""
    starts: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for folded, chars in _folds().items():
        text = unicodedata.normalize("NFD", folded)
        starts.setdefault(text[0], []).append((text, chars))
    return {first: tuple(texts) for first, texts in starts.items()}


def _code_points(size: int = 256) -> Iterator[str]:
    """Every code point but the surrogates, in blocks of ``size``."""
    codec = f"utf-32-{sys.byteorder[0]}e"
    for start in range(0, sys.maxunicode + 1, size):
        if not 0xD800 <= start < 0xE000:
            points = array("I", range(start, min(start + size, sys.maxunicode + 1)))
            yield points.tobytes().decode(codec)


def _planned(
    registry: PolicyRegistry,
    request: Any,
    tried: object,
    *,
    charge: bool = False,
) -> Planned | None:
    """The engine checks of the failed-login policies for a login that tries the username
    ``tried``, None if none apply: of its look, or of its failure's ``charge`` (neither
    counted in the metrics nor signalled)."""
    request = _http(request)
    if request is None:
        return None
    specs = _applying(registry, request)
    if not specs:
        return None
    set_login_username(request, tried)
    name = login_username(request)
    behind = None if name is None else username_behind(name)
    return Planned(request, specs, behind=behind, observed=not charge, looks=charge)


def _http(request: Any) -> HttpRequest | None:
    """The Django request (DRF's wraps one), None without one."""
    if not isinstance(request, HttpRequest):
        request = getattr(request, "_request", None)
    return request if isinstance(request, HttpRequest) else None


def _applying(registry: PolicyRegistry, request: HttpRequest) -> tuple[PolicySpec, ...]:
    """The failed-login policies that guard ``request``'s login: every one that applies
    to its method and has no path pattern, or one that matches its path, or the path
    without its language prefix (``/fr/accounts/login/``: the view of ``/accounts/login/``)."""
    method = request.method or "POST"
    specs = [spec for spec in registry.failed_logins() if spec.applies_to_method(method)]
    if all(spec.path_re is None for spec in specs):
        return tuple(specs)
    paths = [request.path_info]
    if (bare := unprefixed(request)) is not None:
        paths.append(bare)
    return tuple(
        spec
        for spec in specs
        if spec.path_re is None or any(spec.path_re.search(path) for path in paths)
    )


def _username_field(credentials: Mapping[str, Any]) -> str:
    """The credential naming the username a login tries: ``username``, else the user
    model's username field."""
    return "username" if "username" in credentials else get_user_model().USERNAME_FIELD


def _tried(credentials: Mapping[str, Any]) -> object:
    """The username a login tries, as a backend is given it."""
    return credentials.get(_username_field(credentials))


#: The credentials ``user_login_failed`` hands over masked (Django's
#: ``django.contrib.auth._clean_credentials``).
_MASKED: Final = re.compile("api|token|key|secret|password|signature", re.IGNORECASE)


def _tried_after_failure(request: Any, credentials: Mapping[str, Any]) -> object:
    """The username a failed login tried, from ``user_login_failed``'s credentials.

    Django masks a credential whose name looks secret (a ``USERNAME_FIELD`` such as
    ``api_key`` or ``login_token``): its failures would all count against the mask,
    one name no one logs in with, and never against the account tried. The name
    :class:`FailedLoginBackend` noted on the request before the password stands for it
    (``None``, no username, without that backend: never the mask)."""
    if not _MASKED.search(_username_field(credentials)):
        return _tried(credentials)
    http = _http(request)
    return None if http is None else login_username(http)


_warned = False


def _warn_without_backend() -> None:
    """Log once per process that failed logins are counted but nothing refuses them."""
    global _warned
    if _warned or BACKEND in settings.AUTHENTICATION_BACKENDS:
        return
    _warned = True
    logger.error(
        "failed logins are counted, but %s is not in AUTHENTICATION_BACKENDS: no login is "
        "refused over the limit (see docs/logins.md)",
        BACKEND,
    )
