"""Demo traffic through the site's own rate-limited URLs, so the dashboard has offenders.

:func:`run` sends requests with Django's test ``Client`` through the configured
URLconf: the middleware, the ``@ratelimit`` decorators and the enabled
policies decide them exactly as they decide real requests (only the socket is
skipped), against the configured Redis. ``python -m devtools.simulate`` (see
:mod:`devtools.simulate.__main__`) and ``make demo`` call it.

The targets are the routes an enabled policy applies to: routes without
converters that a policy's path pattern matches (GET if it applies to GET,
else POST) or whose view names a policy with ``@ratelimit``. Pages behind the
admin login are left alone. The cast (addresses from the documentation ranges):

* an office behind one NAT address: six users, each well within the limits,
  together over the per-address ones, so the address is denied and the
  dashboard shows who was behind it;
* one user from two addresses (home and phone): each address under the
  limits, the user over them;
* three anonymous attackers, one over IPv6, hammering everything and POSTing
  to the login forms;
* two well-behaved clients.

Rounds of :data:`ROUND_SECONDS` pace the traffic so that per-second limits see
steady rates; a run stops after ``seconds`` or ``requests``, whichever comes
first. Log records below ERROR are muted while it runs (each 429 would be a
``django.request`` warning). The users of the cast (:data:`USERS`, all named
``sim-*``) are created in the site's database the first time (active, with no
usable password); :attr:`Summary.created_users` names the ones a run created.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern

from django_ratelimits.policies import PolicyRegistry, current
from django_ratelimits.policies.spec import PolicySpec
from django_ratelimits.resolved import VIEW_POLICIES
from django_ratelimits.signals import rate_limited

ROUND_SECONDS = 0.25
_REGEX_SPECIAL = frozenset(".^$*+?{}[]\\|()")


@dataclass(frozen=True)
class Visitor:
    """One client address and who uses it: a test client per user (``None``: anonymous)."""

    role: str
    address: str
    users: tuple[str | None, ...]
    per_round: int  # requests per client per round
    posts: bool = False  # one more per round to a POST target (logins)


CAST = (
    Visitor("office NAT", "198.51.100.10", tuple(f"sim-office-{n}" for n in range(1, 7)), 1),
    Visitor("roaming, home", "203.0.113.20", ("sim-roamer",), 2),
    Visitor("roaming, phone", "2001:db8:4:7::15", ("sim-roamer",), 2),
    Visitor("attacker", "203.0.113.66", (None,), 4, posts=True),
    Visitor("attacker", "203.0.113.77", (None,), 4, posts=True),
    Visitor("attacker", "2001:db8:bad:1::9", (None,), 4, posts=True),
    Visitor("regular", "192.0.2.10", (None,), 1),
    Visitor("regular", "192.0.2.11", ("sim-regular",), 1),
)
USERS = tuple(dict.fromkeys(u for v in CAST for u in v.users if u is not None))


@dataclass(frozen=True)
class Target:
    method: str
    path: str
    policies: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


class NoTargets(Exception):
    """No route of the site is limited by an enabled policy."""


@dataclass
class Summary:
    """What a run sent and what the limiter answered."""

    targets: tuple[Target, ...]
    seconds: float = 0.0
    statuses: Counter[int] = field(default_factory=Counter)
    denied: Counter[str] = field(default_factory=Counter)  # by policy, enforced
    shadow: Counter[str] = field(default_factory=Counter)  # by policy, shadow (not refused)
    sent: Counter[str] = field(default_factory=Counter)  # by visitor
    limited: Counter[str] = field(default_factory=Counter)  # 429s by visitor
    created_users: list[str] = field(default_factory=list)  # user names this run created

    @property
    def requests(self) -> int:
        return self.statuses.total()

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "requests": self.requests,
            "limited": self.statuses[429],
            "created_users": self.created_users,
            "statuses": {str(code): n for code, n in sorted(self.statuses.items())},
            "denials": dict(self.denied.most_common()),
            "shadow_denials": dict(self.shadow.most_common()),
            "targets": [
                {"method": t.method, "path": t.path, "policies": list(t.policies)}
                for t in self.targets
            ],
            "visitors": [
                {"visitor": name, "requests": n, "limited": self.limited[name]}
                for name, n in self.sent.items()
            ],
        }

    def report(self) -> str:
        def counts(counter: Counter[str]) -> str:
            return ", ".join(f"{name} {n}" for name, n in counter.most_common()) or "none"

        width = max(map(len, self.sent), default=0)
        return "\n".join(
            [
                f"{self.requests} requests in {self.seconds:.1f}s: "
                f"{self.requests - self.statuses[429]} allowed, {self.statuses[429]} limited (429)",
                f"targets: {', '.join(map(str, self.targets))}",
                f"denials by policy: {counts(self.denied)}",
                f"shadow denials (not refused): {counts(self.shadow)}",
                f"users created: {', '.join(self.created_users) or 'none (they existed)'}",
                "by visitor:",
                *(
                    f"  {name:<{width}}  {n:>5} requests  {self.limited[name]:>5} limited"
                    for name, n in self.sent.items()
                ),
            ]
        )


def run(
    *, seconds: float = 10.0, requests: int = 5000, cast: Iterable[Visitor] = CAST, seed: int = 4
) -> Summary:
    """Send the cast's traffic for at most ``seconds`` and ``requests``; say what happened."""
    found = targets(current())
    if not found:
        raise NoTargets(
            "no route of this site is limited by an enabled policy (a path pattern that "
            "matches a route without converters, or a view decorated with @ratelimit)"
        )
    gets = [t for t in found if t.method == "GET"] or found
    posts = [t for t in found if t.method == "POST"]
    summary = Summary(tuple(found))
    clients = [
        (f"{v.role} {v.address}", v, _client(v.address, u, summary.created_users))
        for v in cast
        for u in v.users
    ]
    rng = random.Random(seed)

    def count(*, policy: PolicySpec, shadow: bool, **kwargs: Any) -> None:
        (summary.shadow if shadow else summary.denied)[policy.name] += 1

    uid = f"devtools.simulate.{id(summary)}"
    rate_limited.connect(count, weak=False, dispatch_uid=uid)
    muted = logging.root.manager.disable
    logging.disable(max(muted, logging.WARNING))  # every 429 is a django.request warning
    started = time.monotonic()
    deadline = started + seconds
    try:
        while time.monotonic() < deadline and summary.requests < requests:
            round_end = time.monotonic() + ROUND_SECONDS
            for name, visitor, client in clients:
                plan = [rng.choice(gets) for _ in range(visitor.per_round)]
                if visitor.posts and posts:
                    plan.append(rng.choice(posts))
                for target in plan:
                    if summary.requests >= requests or time.monotonic() >= deadline:
                        break
                    status = _send(client, target)
                    summary.statuses[status] += 1
                    summary.sent[name] += 1
                    summary.limited[name] += status == 429
            time.sleep(max(0.0, min(round_end, deadline) - time.monotonic()))
    finally:
        rate_limited.disconnect(dispatch_uid=uid)
        logging.disable(muted)
        summary.seconds = time.monotonic() - started
    return summary


def targets(registry: PolicyRegistry) -> list[Target]:
    """The routes an enabled policy applies to, each with the method to send."""
    found = []
    for path, view in _routes(get_resolver().url_patterns, "/"):
        if hasattr(view, "admin_site"):  # wrapped by admin_view: behind the admin login
            continue
        named = [registry.get(name) for name in getattr(view, VIEW_POLICIES, ())]
        for method in ("GET", "POST"):
            names = [s.name for s in registry.match(path, method)]
            names += [s.name for s in named if s is not None and s.applies_to_method(method)]
            if names:
                found.append(Target(method, path, tuple(dict.fromkeys(names))))
                break
    return found


def _routes(
    patterns: Iterable[URLPattern | URLResolver], prefix: str
) -> Iterator[tuple[str, Callable[..., Any]]]:
    """``(path, view)`` of every route that takes no parameters."""
    for entry in patterns:
        part = _literal(entry.pattern)
        if part is None:
            continue
        if isinstance(entry, URLResolver):
            yield from _routes(entry.url_patterns, prefix + part)
        else:
            yield prefix + part, entry.callback


def _literal(pattern: Any) -> str | None:
    """The text a URL pattern matches, if it matches exactly one text."""
    text = str(pattern)
    if isinstance(pattern, RoutePattern):
        return None if "<" in text else text
    text = text.removeprefix("^").removesuffix("\\Z").removesuffix("$")
    return None if _REGEX_SPECIAL.intersection(text) else text


def _client(address: str, username: str | None, created_users: list[str]) -> Client:
    client = Client(REMOTE_ADDR=address, HTTP_HOST=_host(), raise_request_exception=False)
    if username is not None:
        model = get_user_model()
        lookup: dict[str, Any] = {model.USERNAME_FIELD: username}
        user, created = model._default_manager.get_or_create(**lookup)
        if created:
            user.set_unusable_password()
            user.save()
            created_users.append(username)
        client.force_login(user)
    return client


def _host() -> str:
    """A host name the site accepts (``ALLOWED_HOSTS``), for the Host header."""
    for host in settings.ALLOWED_HOSTS:
        if host != "*":
            return host.lstrip(".")
    return "localhost"


def _send(client: Client, target: Target) -> int:
    if target.method == "POST":  # a login attempt that never reaches a password check
        return client.post(target.path, {"username": "admin"}).status_code
    return client.get(target.path).status_code
