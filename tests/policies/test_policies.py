"""The policy registry: matching, declared defaults, refreshing, and two processes."""

from __future__ import annotations

import doctest
import logging
import queue
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection, connections
from django.forms.models import model_to_dict
from django.test import Client, override_settings
from django.urls import reverse
from hypothesis import example, given
from hypothesis import strategies as st

from django_ratelimits.models import Policy, PolicyVersion
from django_ratelimits.policies import PolicyRegistry, current, get_registry
from django_ratelimits.policies import matching as path_patterns
from django_ratelimits.policies import registry as policies
from django_ratelimits.policies.matching import PathPattern, PatternError, literal_prefix
from django_ratelimits.policies.spec import Mode, PolicySpec, Recording
from django_ratelimits.rates import parse_rates
from tests.dashboard.test_admin import NO_TIERS

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    """Seconds that move only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def names(specs: tuple[PolicySpec, ...]) -> list[str]:
    return [spec.name for spec in specs]


def add(name: str, **fields: Any) -> Policy:
    values: dict[str, Any] = {"name": name, "rates": "10/s"}
    values.update(fields)
    return Policy.objects.create(**values)


@pytest.fixture
def registry() -> PolicyRegistry:
    return PolicyRegistry(clock=Clock())


# --------------------------------------------------------------------------- matching


@pytest.mark.django_db
def test_match_orders_by_priority_then_name(registry: PolicyRegistry) -> None:
    add("b-api", path="^/api/")
    add("a-api", path="^/api/")
    add("urgent", path="/orders", priority=10)
    add("low", path="^/", priority=-5)
    registry.refresh()
    assert names(registry.match("/api/orders", "GET")) == ["urgent", "a-api", "b-api", "low"]
    assert names(registry.match("/web/", "GET")) == ["low"]


@pytest.mark.django_db
def test_match_applies_methods_and_paths(registry: PolicyRegistry) -> None:
    add("login", path="^/login/$", methods="POST")
    add("reads", path=r"^/api/v\d+/", methods="GET, HEAD")
    add("anywhere", path="export")
    add("decorator-only")
    registry.refresh()
    assert names(registry.match("/login/", "POST")) == ["login"]
    assert names(registry.match("/login/", "post")) == ["login"]
    assert registry.match("/login/", "GET") == ()
    assert registry.match("/login/x", "POST") == ()
    assert names(registry.match("/api/v2/items", "HEAD")) == ["reads"]
    assert registry.match("/api/vx/items", "GET") == ()
    assert names(registry.match("/api/v1/export", "GET")) == ["anywhere", "reads"]
    assert registry.match("/", "GET") == ()


@pytest.mark.django_db
def test_match_works_for_paths_too_long_to_cache(registry: PolicyRegistry) -> None:
    add("api", path="^/api/")
    registry.refresh()
    long_path = "/api/" + "x" * (policies.CACHE_PATH_MAX + 1)
    assert names(registry.match(long_path, "GET")) == ["api"]
    assert names(registry.match(long_path[:100], "GET")) == ["api"]


@pytest.mark.django_db
def test_disabled_policies_are_invisible(registry: PolicyRegistry) -> None:
    add("off", path="^/", enabled=False)
    add("on", path="^/")
    registry.refresh()
    assert names(registry.match("/", "GET")) == ["on"]
    assert registry.get("off") is None
    assert registry.get("on") is not None
    assert registry.get("missing") is None


@pytest.mark.django_db
def test_match_and_get_never_query(
    registry: PolicyRegistry, django_assert_num_queries: Any
) -> None:
    add("api", path="^/api/")
    registry.refresh()
    with django_assert_num_queries(0):
        registry.match("/api/x", "GET")
        registry.match("/api/x", "GET")
        registry.get("api")
        registry.is_stale()


def test_literal_prefix_examples() -> None:
    assert doctest.testmod(path_patterns).failed == 0
    cases = {
        "^/api/": "/api/",
        r"\A/api/": "/api/",
        "^/login/$": "/login/",
        r"^/api/v\d+/": "/api/v",
        r"^/a\.b\-c/": "/a.b-c/",
        "^/ab?": "/a",
        "^/ab*": "/a",
        "^/ab+c": "/ab",
        "^/ab{2}": "/a",
        "^/(api|web)/": "/",
        "^/api|/web": "",
        "^/a[|]b": "/a",
        "^/a(b|c)|d": "",
        "^/a[]|]b|c": "",
        r"^/a\|b": "/a|b",
        "/api/": "",
        "(?i)^/api/": "",
        "^.api": "",
        "^/é/": "/é/",
        # RE2's zero-width constructs: the quantifier after them repeats the "b".
        "^/ab(?i)*": "/a",
        "^/ab(?U)?c": "/a",
        "^/ab(?:c)*": "/ab",
        "^/ab(c)?": "/ab",
        "^/ab(?i)c": "/a",
        "^/a+/": "/a",
        "^/api/h+(?i)*": "/api/",  # the "*" repeats "h+": /api/other matches
        "^/ab+?c": "/a",
        # A class or a quote that hides a top-level "|": no prefix at all.
        "^/x[[:alpha:](]|/y": "",
        r"^/x\Q(\E|/y": "",
        r"^/ab\Q\E*": "",
        r"^/a\_b\ c": "/a_b c",
        r"^/a\x41": "/",
        r"^/a\d*": "/a",
        "^/a$": "/a",
        "^/a{,3}": "/",
    }
    for pattern, prefix in cases.items():
        assert literal_prefix(pattern) == prefix, pattern


PIECES = ["/", "a", "b", ".", r"\.", r"\/", "*", "+", "?", "{2}", "|", "(a|b)", "[ab]", "[]a]",
          "(?:ab)", r"\d", "$", "^", "ab", "(", ")", "[^/]",
          # What RE2 reads otherwise than a simple scanner: flags and comments (refused)
          # before a quantifier, quoting, POSIX classes, escapes, \z, empty groups.
          "(?i)", "(?U)", "(?#x)", "(?m)", r"\Q", r"\E", "[[:alpha:]]", "[[:alpha:](]", "(?:)",
          "()", r"\pN", "{,3}", r"\z", r"\b", r"\A", r"\_", r"\x41", "A", r"\n",
          "(?P<n>a)"]  # fmt: skip
patterns = st.builds(
    lambda anchor, parts: anchor + "".join(parts),
    st.sampled_from(["^", r"\A", ""]),
    st.lists(st.sampled_from(PIECES), max_size=8),
)
paths = st.text(alphabet="/ab.1|A(\né", max_size=12)


def _compiles(pattern: str) -> bool:
    try:
        PathPattern(pattern)
    except PatternError:
        return False
    return True


@given(patterns.filter(_compiles), paths)
@example(r"^/a\.b", "/a.b")
@example("^/ab(?i)*", "/a")
@example("^/api/h+(?i)*", "/api/other")
@example("^/a.b", "/a\nb")
@example("^/x[[:alpha:](]|/y", "/y")
@example("^/login/$", "/login/\n")
def test_every_match_starts_with_the_literal_prefix(pattern: str, path: str) -> None:
    if PathPattern(pattern).search(path):
        assert path.startswith(literal_prefix(pattern))


@given(st.lists(patterns.filter(_compiles), min_size=1, max_size=12), st.lists(paths, max_size=8))
def test_indexed_match_equals_a_linear_scan(pattern_list: list[str], path_list: list[str]) -> None:
    # Some policies are for POST only, some for a made-up method; more
    # methods are asked than get an index of their own (the rest share one).
    only = [frozenset(), frozenset({"POST"}), frozenset(), frozenset({"M3"}), frozenset()]
    specs = [
        PolicySpec(
            name=f"p{i}", rates=parse_rates("1/s"), path=p, priority=i % 3, methods=only[i % 5]
        )
        for i, p in enumerate(pattern_list)
    ]
    snapshot = policies._Snapshot(specs, frozenset())
    methods = ["GET", "POST", *(f"M{n}" for n in range(2 * policies._METHODS_MAX))]
    for path in path_list:
        for method in methods:
            expected = [
                s
                for s in snapshot.ordered
                if s.path_re and s.applies_to_method(method) and s.path_re.search(path)
            ]
            assert list(snapshot.match(path, method)) == expected


# --------------------------------------------------------------------------- declared defaults


def declared(name: str = "signup", **fields: Any) -> PolicySpec:
    return PolicySpec(name=name, rates=parse_rates(fields.pop("rates", "5/m")), **fields)


@pytest.mark.django_db
def test_declare_creates_the_missing_row(registry: PolicyRegistry) -> None:
    spec = declared(path="^/signup/", methods=frozenset({"POST"}), record_metadata=Recording.EVERY)
    registry.declare(spec)
    assert registry.get("signup") is spec  # before any refresh: the code default
    registry.refresh()
    row = Policy.objects.get(name="signup")
    assert (row.rates, row.path, row.methods, row.record_metadata) == (
        "5/m",
        "^/signup/",
        "POST",
        "every",
    )
    assert registry.get("signup") == spec
    assert names(registry.match("/signup/", "POST")) == ["signup"]


@pytest.mark.parametrize("key", ["username", "ip_and_username", "header:bad name{}", "header"])
def test_code_declares_only_a_key_admin_would_save(key: str) -> None:
    # Else its row would fail to compile at every reload while the code counted by IP.
    from django_ratelimits.policies.declare import declared as declare

    with pytest.raises(ValueError, match="policy 'signup'"):
        declare("signup", rate="5/m", key=key)


def test_code_declares_only_a_sliding_log_admin_would_save() -> None:
    # A member per admitted request and window: at most 10,000 a window, as in admin.
    from django_ratelimits.policies.declare import declared as declare

    with pytest.raises(ValueError, match=r"policy 'exports'.*at most 10000 per window"):
        declare("exports", rate="20000/h", algorithm="sliding_log")
    assert declare("exports", rate="10000/h", algorithm="sliding_log").rates[0].limit == 10000


@pytest.mark.django_db
def test_an_existing_row_wins_over_the_declaration(registry: PolicyRegistry) -> None:
    add("signup", rates="50/m", mode="shadow")
    registry.declare(declared())
    registry.refresh()
    spec = registry.get("signup")
    assert spec is not None
    assert (spec.rates, spec.mode) == (parse_rates("50/m"), Mode.SHADOW)
    assert Policy.objects.get(name="signup").rates == "50/m"


@pytest.mark.django_db
def test_a_disabled_row_turns_the_declared_policy_off(registry: PolicyRegistry) -> None:
    add("signup", enabled=False)
    registry.declare(declared())
    registry.refresh()
    assert registry.get("signup") is None


@pytest.mark.django_db
def test_a_declared_row_is_written_once(registry: PolicyRegistry) -> None:
    registry.declare(declared())
    registry.refresh()
    Policy.objects.filter(name="signup").delete()
    registry.refresh()  # deleting the row is not undone by this process
    assert not Policy.objects.filter(name="signup").exists()
    assert registry.get("signup") == declared()


@pytest.mark.django_db
def test_a_failed_declared_write_does_not_stop_the_reload(
    registry: PolicyRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    add("api", path="^/api/")
    registry.declare(declared())
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TRIGGER read_only BEFORE INSERT ON {Policy._meta.db_table} "
            "BEGIN SELECT RAISE(ABORT, 'read-only database'); END"
        )
    with caplog.at_level(logging.ERROR, logger="django_ratelimits.policies"):
        registry.refresh()
    assert "could not create the rows of declared rate-limit policies" in caplog.text
    assert names(registry.match("/api/", "GET")) == ["api"]
    assert registry.get("signup") == declared()


# --------------------------------------------------------------------------- refreshing


@pytest.mark.django_db
def test_an_edit_is_seen_only_once_stale(registry: PolicyRegistry) -> None:
    clock = registry._clock
    assert isinstance(clock, Clock)
    assert registry.is_stale()
    policy = add("api", rates="10/s", path="^/api/")
    registry.refresh()
    assert not registry.is_stale()
    Policy.objects.filter(pk=policy.pk).update(rates="20/s")
    clock.now += 1.9
    assert not registry.is_stale()
    assert registry.get("api").rates == parse_rates("10/s")  # type: ignore[union-attr]
    clock.now += 0.1
    assert registry.is_stale()
    registry.refresh()
    assert registry.get("api").rates == parse_rates("20/s")  # type: ignore[union-attr]
    with override_settings(DJANGO_RATELIMITS={"POLICY_REFRESH": 0.5}):
        clock.now += 0.5
        assert registry.is_stale()


@pytest.mark.django_db
def test_an_unchanged_stamp_costs_one_query(
    registry: PolicyRegistry, django_assert_num_queries: Any
) -> None:
    add("api", path="^/api/")
    registry.refresh()
    with django_assert_num_queries(1) as captured:
        registry.refresh()
    assert "policyversion" in captured.captured_queries[0]["sql"]


@pytest.mark.django_db
def test_a_reload_drops_the_match_cache(registry: PolicyRegistry) -> None:
    policy = add("api", path="^/api/")
    registry.refresh()
    assert names(registry.match("/api/x", "GET")) == ["api"]
    policy.path = "^/web/"
    policy.save()
    registry.refresh()
    assert registry.match("/api/x", "GET") == ()
    policy.delete()
    registry.refresh()
    assert registry.get("api") is None


@pytest.mark.django_db
def test_a_broken_row_is_skipped_and_logged(
    registry: PolicyRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    add("good", path="^/")
    add("bad-rates", path="^/")
    add("bad-path", path="^/")
    Policy.objects.filter(name="bad-rates").update(rates="lots")
    Policy.objects.filter(name="bad-path").update(path="(")
    registry.declare(declared("bad-rates"))
    with caplog.at_level(logging.ERROR, logger="django_ratelimits.policies"):
        registry.refresh()
    assert names(registry.match("/", "GET")) == ["good"]
    messages = [record.getMessage() for record in caplog.records]
    assert any(
        "'bad-rates' is invalid and skipped" in m and "expected an integer" in m for m in messages
    )
    assert any("'bad-path' is invalid and skipped" in m for m in messages)
    assert registry.get("bad-rates") == declared("bad-rates")  # the code default still protects


@pytest.mark.django_db
def test_a_row_whose_pattern_re2_refuses_is_skipped_and_logged_with_the_reason(
    registry: PolicyRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    add("good", path="^/")
    add("backref", path="^/")
    Policy.objects.filter(name="backref").update(path=r"^/(\w+)/\1")  # saved before RE2
    with caplog.at_level(logging.ERROR, logger="django_ratelimits.policies"):
        registry.refresh()
    assert names(registry.match("/a/a", "GET")) == ["good"]
    assert any(
        "'backref' is invalid and skipped" in m and "invalid escape sequence: \\1" in m
        for m in (record.getMessage() for record in caplog.records)
    )


@pytest.mark.django_db
def test_an_unreachable_database_keeps_the_loaded_policies(
    registry: PolicyRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    add("api", path="^/api/")
    registry.refresh()
    table = PolicyVersion._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} RENAME TO gone")
    registry._clock.now += 5  # type: ignore[attr-defined]
    with caplog.at_level(logging.ERROR, logger="django_ratelimits.policies"):
        registry.refresh()
    assert "could not refresh rate-limit policies, keeping the 1 loaded" in caplog.text
    assert names(registry.match("/api/", "GET")) == ["api"]
    assert not registry.is_stale()  # the next try waits a full interval


@pytest.mark.django_db
def test_current_refreshes_the_process_registry_when_stale() -> None:
    add("api", path="^/api/")
    registry = get_registry()
    registry.refresh()
    Policy.objects.filter(name="api").update(enabled=False)
    registry._refreshed_at = None  # as if the interval had passed
    assert current() is registry
    assert registry.get("api") is None


# --------------------------------------------------------------------------- two processes

WORKER = r"""
import os, sys, time
import django
import tests.settings as test_settings

test_settings.DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": sys.argv[1]}
}
test_settings.DJANGO_RATELIMITS = {"POLICY_REFRESH": float(sys.argv[2])}
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
django.setup()
from django_ratelimits.policies import PolicyRegistry

registry, seen, deadline = PolicyRegistry(), None, time.monotonic() + 60
while time.monotonic() < deadline:  # a worker: refresh when stale, then read
    if registry.is_stale():
        registry.refresh()
    spec = registry.get("login")
    rates = ", ".join(str(rate) for rate in spec.rates) if spec else "-"
    if rates != seen:
        seen = rates
        print(time.monotonic(), rates, flush=True)
    time.sleep(0.001)
"""


@pytest.fixture
def file_database(tmp_path: Path, django_db_blocker: Any) -> Iterator[Path]:
    """The default connection on a migrated SQLite file that another process can open."""
    path = tmp_path / "shared.sqlite3"
    original = connections["default"]
    shared = original.__class__({**original.settings_dict, "NAME": str(path)}, "default")
    with django_db_blocker.unblock():
        connections["default"] = shared
        ContentType.objects.clear_cache()
        try:
            call_command("migrate", verbosity=0, interactive=False)
            yield path
        finally:
            shared.close()
            connections["default"] = original
            ContentType.objects.clear_cache()


def _lines(stream: Any) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lines


def test_an_admin_edit_reaches_another_process(
    file_database: Path, record_property: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three edits through the admin form, each at a random point of the worker's interval.

    The delay runs from sending the POST to the worker printing the new rates.
    """
    refresh = 0.5
    admin = User.objects.create_superuser("admin", "admin@example.com", "pw")
    policy = add("login", rates="5/m", path="^/login/", methods="POST")
    url = reverse("admin:django_ratelimits_policy_change", args=[policy.pk])
    data = {k: "" if v is None else v for k, v in model_to_dict(policy).items() if k != "id"}
    data |= NO_TIERS
    client = Client()
    client.force_login(admin)
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(file_database), str(refresh)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    delays, posts = [], []
    try:
        lines = _lines(worker.stdout)
        assert lines.get(timeout=60).split()[1:] == ["5/m"]
        for limit in (7, 8, 9):
            time.sleep(random.uniform(0, refresh))
            sent = time.monotonic()
            response = client.post(url, {**data, "rates": f"{limit}/m, 100/h"})
            posts.append(time.monotonic() - sent)
            assert response.status_code == 302, response.content.decode()[:2000]
            seen_at, *rates = lines.get(timeout=refresh + 30).split()
            assert rates == [f"{limit}/m,", "100/h"]
            delays.append(float(seen_at) - sent)
    finally:
        worker.kill()
        worker.wait()
    record_property("propagation_delays_s", [round(delay, 3) for delay in delays])
    with capsys.disabled():
        shown = ", ".join(f"{delay:.3f}" for delay in delays)
        print(f"\nadmin edits seen by another process after {shown} s (POLICY_REFRESH {refresh})")
    # The interval, plus room that grows with how slow the machine is now (the admin
    # POST's own time), so a busy CI machine cannot fail it but a missed refresh does.
    assert max(delays) <= refresh + 1.5 + 3 * max(posts)


@pytest.mark.django_db
def test_all_lists_enabled_rows_then_defaults_without_a_row() -> None:
    from django_ratelimits.policies import PolicyRegistry
    from django_ratelimits.policies.spec import PolicySpec
    from django_ratelimits.rates import parse_rates

    Policy.objects.create(name="b-api", rates="5/m", priority=1)
    Policy.objects.create(name="a-off", rates="5/m", enabled=False)
    registry = PolicyRegistry()
    registry.declare(PolicySpec("a-off", parse_rates("1/m")))
    registry.declare(PolicySpec("z-code", parse_rates("1/m")))
    registry.refresh()
    assert [p.name for p in registry.all()] == ["b-api", "z-code"]


def test_every_kind_of_identity_a_policy_counts_is_known_to_forget_and_to_staff() -> None:
    """The kinds staff may name (the command, the dashboard) and the kinds whose identity
    budgets forgetting an IP erases are one list: a new kind of key that counted a kind
    missing from it could neither be named nor forgotten."""
    from django_ratelimits.policies.spec import GATED_KINDS, IDENTITY_KINDS, KeyKind

    counted = {kind for key in KeyKind for kind in key.identity_kinds}
    assert counted == set(IDENTITY_KINDS)
    # And the compat layer's query and form keys (django_ratelimits.compat).
    assert set(GATED_KINDS) == counted - {"ip"} | {"get", "post"}
