"""``manage.py ratelimits``: output (text and JSON), actions, errors; on both topologies."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory, override_settings
from redis.cluster import RedisCluster

from devtools.redis_harness import RedisClusterHarness, dead_port
from django_ratelimits.compat import ratelimit as compat_ratelimit
from django_ratelimits.engine import Check, Engine, Identity, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.engine.offenders import OffenderReader
from django_ratelimits.management.commands import ratelimits
from django_ratelimits.models import Policy
from django_ratelimits.offenders import RECORDED_KINDS
from django_ratelimits.policies import current, get_registry
from django_ratelimits.policies.spec import GATED_KINDS
from django_ratelimits.testing import FakeClock
from tests.operations.eviction import blind_url, redis_with

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
OFFICE, ATTACKER = "198.51.100.10", "203.0.113.99"


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("ratelimits", *args, stdout=out)
    return out.getvalue()


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json"))


def policy(**fields: Any) -> None:
    Policy.objects.create(**fields)
    get_registry().refresh()


@pytest.fixture
def engine(site_redis: Any, monkeypatch: pytest.MonkeyPatch) -> Engine:
    """The command's engine, on a fake clock: the offender index takes at most one
    update a second per identity, so :func:`scripted` spaces its requests."""
    configured = get_engine()
    # At the start of this minute: a test's few seconds of fake time stay in one window
    # of a per-minute fixed window, however fast the machine is.
    minute = 60_000_000
    clock = FakeClock(start_us=time.time_ns() // 1000 // minute * minute)
    engine = Engine(configured.client, keys=configured.keys, clock=clock)
    monkeypatch.setattr(ratelimits, "get_engine", lambda: engine)
    return engine


EVERY = {"record_every": True}  # as the "login" policy below asks


def scripted(engine: Engine) -> tuple[User, User]:
    """Alice and Bob behind one office address, and an anonymous attacker."""
    assert isinstance(engine.clock, FakeClock)
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    policy(name="login", rates="2/m", algorithm="sliding_log", key="ip", record_metadata="every")
    policy(name="api", rates="3/m", algorithm="fixed_window", key="ip_and_user", path="^/api/")
    login, api = current().get("login"), current().get("api")
    assert login is not None and api is not None
    for n in range(6):
        user = alice if n % 2 else bob
        engine.check(
            [
                Check(Identity("ip", OFFICE), login.limits, f"user:{user.pk}|POST /login", **EVERY),
                Check(
                    Identity("user", str(user.pk)),
                    login.limits,
                    f"ip:{OFFICE}|POST /login",
                    **EVERY,
                ),
            ]
        )
        engine.clock.advance(1.5)
    for _ in range(10):
        engine.check([Check(Identity("ip", ATTACKER), login.limits + api.limits, "user:-|x")])
        engine.clock.advance(1.5)
    return alice, bob


# --------------------------------------------------------------------------- offenders


def test_offenders_lists_the_denied_identities(engine: Engine) -> None:
    alice, bob = scripted(engine)
    data = run_json("offenders", "--period", "5m")
    got = {row["identity"]: (row["denials"], row["by_policy"]) for row in data["offenders"]}
    assert got == {
        f"ip:{OFFICE}": (4, {"login": 4}),
        f"ip:{ATTACKER}": (8, {"login": 8}),
        f"user:{alice.pk}": (1, {"login": 1}),
        f"user:{bob.pk}": (1, {"login": 1}),
    }
    assert data["total"] == 4 and data["period"] == 300
    assert all(row["override"] is None for row in data["offenders"])
    assert data["usernames"] == {f"user:{alice.pk}": "alice", f"user:{bob.pk}": "bob"}

    text = run("offenders", "--period", "5m")
    assert text.startswith("4 identities denied in the last 5m; rows 1-4, by last denial:\n")
    assert text.splitlines()[1].split()[:3] == ["identity", "denials", "by"]
    attacker = next(line for line in text.splitlines() if ATTACKER in line)
    assert attacker.split()[1:4] == ["8", "login", "8"] and "s ago" in attacker
    assert f"user:{alice.pk} (alice)" in text


def test_offenders_and_show_say_which_users_no_longer_exist(engine: Engine) -> None:
    """A user deleted since the limiter counted it (a deleted spam account) is still an
    offender Redis holds: listed and shown as gone, not as a bare id nor as someone else."""
    alice, bob = scripted(engine)
    gone = f"user:{bob.pk}"
    bob.delete()
    data = run_json("offenders", "--period", "5m")
    assert data["usernames"] == {f"user:{alice.pk}": "alice"}
    assert data["deleted_users"] == [gone]
    text = run("offenders", "--period", "5m")
    assert f"{gone} (no longer exists)" in text and f"user:{alice.pk} (alice)" in text

    shown = run_json("show", gone)
    assert shown["deleted_users"] == [gone] and shown["offender"]["denials"] == 1
    assert run("show", gone).startswith(f"{gone} (no longer exists)")
    behind = run("show", f"ip:{OFFICE}")
    assert f"{gone} (no longer exists) x3" in behind and f"user:{alice.pk} (alice) x3" in behind


def test_offenders_sort_filter_and_paginate(engine: Engine) -> None:
    alice, bob = scripted(engine)
    by_count = run_json("offenders", "--order", "denials", "--limit", "2")["offenders"]
    assert [row["identity"] for row in by_count] == [f"ip:{ATTACKER}", f"ip:{OFFICE}"]
    users = run_json("offenders", "--kind", "user")["offenders"]
    assert {row["identity"] for row in users} == {f"user:{alice.pk}", f"user:{bob.pk}"}
    assert run_json("offenders", "--policy", "api")["offenders"] == []
    assert "none to show" in run("offenders", "--policy", "api")
    first = run_json("offenders", "--limit", "3")["offenders"]
    rest = run_json("offenders", "--offset", "3", "--limit", "3")["offenders"]
    assert len(first) == 3 and len(rest) == 1
    assert not {r["ident"] for r in first} & {r["ident"] for r in rest}


def test_offenders_filter_by_any_policy_ever_named_and_refuse_other_names(
    engine: Engine,
) -> None:
    """A disabled policy's, a declared default's and a block's denials can be asked for;
    a name no policy has is an error that lists the names, not "none to show"."""
    scripted(engine)
    policy(name="retired", rates="1/m", enabled=False)
    for name in ("retired", "login", "!blocked"):
        run_json("offenders", "--policy", name)
    refused = (
        r"no policy is named 'Api' and no denial of the last 1d names it \(policies: .*\bapi\b"
    )
    with pytest.raises(CommandError, match=refused):
        run("offenders", "--policy", "Api")
    with pytest.raises(CommandError, match=r"no would-be denial of the last 1d names it"):
        run("offenders", "--policy", "Api", "--shadow")


def test_offenders_filter_by_a_deleted_policy_whose_denials_are_still_recorded(
    engine: Engine,
) -> None:
    scripted(engine)
    Policy.objects.filter(name="login").delete()
    get_registry().refresh()
    assert not current().knows("login")
    rows = run_json("offenders", "--policy", "login")["offenders"]
    assert {row["identity"] for row in rows} >= {f"ip:{ATTACKER}", f"ip:{OFFICE}"}
    # Past its last row, or before its first denial, an empty page; not an error.
    assert run_json("offenders", "--policy", "login", "--offset", "10")["offenders"] == []
    assert "none to show" in run("offenders", "--policy", "login", "--period", "1s")


@compat_ratelimit(group="cmd-compat-ip", key="ip", rate="1/h", block=False)
def compat_ip(request: HttpRequest) -> HttpResponse:
    return HttpResponse("limited" if request.limited else "ok")  # type: ignore[attr-defined]


def test_offenders_filter_by_a_compat_group_no_registry_knows(site_redis: Any) -> None:
    """The django-ratelimit drop-in's groups are policies with denials in the records, but
    the registry never holds them: their name is taken because a record names it."""
    request = lambda: RequestFactory().get("/", REMOTE_ADDR="203.0.113.77")  # noqa: E731
    assert [compat_ip(request()).content for _ in range(3)] == [b"ok", b"limited", b"limited"]
    assert not current().knows("cmd-compat-ip")
    every = run_json("offenders")["offenders"]
    assert [row["by_policy"] for row in every] == [{"cmd-compat-ip": 2}]
    rows = run_json("offenders", "--policy", "cmd-compat-ip")["offenders"]
    assert [row["identity"] for row in rows] == ["ip:203.0.113.77"]
    assert "none to show" in run("offenders", "--policy", "cmd-compat-ip", "--offset", "1")
    with pytest.raises(CommandError, match="no policy is named 'cmd-compat-IP'"):
        run("offenders", "--policy", "cmd-compat-IP")


@compat_ratelimit(group="cmd-compat-fields", key="post:username", rate="1/h", block=False)
@compat_ratelimit(group="cmd-compat-fields", key="get:q", rate="1/h", block=False)
def compat_fields(request: HttpRequest) -> HttpResponse:
    """A django-ratelimit style view: it counts a form field (kind ``post``) and a query
    parameter (kind ``get``), neither a kind any policy counts."""
    return HttpResponse("limited" if request.limited else "ok")  # type: ignore[attr-defined]


def test_offenders_filter_by_the_kinds_the_compat_layer_records(site_redis: Any) -> None:
    for _ in range(2):
        compat_fields(RequestFactory().post("/?q=shoes", {"username": "zed"}))
    every = {row["identity"] for row in run_json("offenders")["offenders"]}
    assert every == {"post:zed", "get:shoes"}
    for kind in ("post", "get"):
        rows = run_json("offenders", "--kind", kind)["offenders"]
        assert [row["identity"] for row in rows] == [
            f"{kind}:" + ("zed" if kind == "post" else "shoes")
        ]
    assert set(GATED_KINDS) <= set(RECORDED_KINDS)  # every kind a budget holds is listed


def test_offenders_count_one_identity_in_the_singular(engine: Engine) -> None:
    policy(name="one", rates="1/m", key="ip")
    one = current().get("one")
    assert one is not None
    for _ in range(2):
        engine.check([Check(Identity("ip", ATTACKER), one.limits)])
    assert run("offenders").startswith("1 identity denied in the last 1h; rows 1-1")
    assert run("offenders", "--shadow").startswith("0 identities shadow policies would")


def test_offenders_show_blocks_in_force(engine: Engine) -> None:
    scripted(engine)
    Controls(engine).block(Identity("ip", ATTACKER), 3600)
    rows = {row["identity"]: row for row in run_json("offenders")["offenders"]}
    override = rows[f"ip:{ATTACKER}"]["override"]
    # Seconds left round up, from the page's time in whole milliseconds.
    assert override["mode"] == "blocked" and 3590 <= override["seconds_left"] <= 3601
    assert rows[f"ip:{OFFICE}"]["override"] is None
    line = next(line for line in run("offenders").splitlines() if ATTACKER in line)
    assert "blocked, " in line and line.endswith(" left")


# --------------------------------------------------------------------------- show


def declared_ip() -> dict[tuple[str, str], int]:
    """The full quota of every other policy counting addresses: the ones ``tests.urls``
    (and any URLconf an earlier test imported) declare with ``@ratelimit(rate=...)``
    (a bucket's is its burst)."""
    return {
        (spec.name, str(limit.rate)): limit.capacity
        for spec in get_registry().counting("ip")
        if spec.name not in ("login", "api")
        for limit in spec.limits
    }


def test_show_tells_who_was_behind_an_address_and_the_quota_left(engine: Engine) -> None:
    alice, bob = scripted(engine)
    data = run_json("show", f"ip:{OFFICE}")
    assert data["identity"] == f"ip:{OFFICE}"
    assert data["offender"]["denials"] == 4 and data["offender"]["by_policy"] == {"login": 4}
    assert sorted((b["who"], b["hits"]) for b in data["behind"]) == sorted(
        [(f"user:{alice.pk}", 3), (f"user:{bob.pk}", 3)]
    )
    assert data["hits_recorded"] == 6 and len(data["hits"]) == 6
    assert [h["allowed"] for h in reversed(data["hits"])] == [True, True] + [False] * 4
    assert data["override"] is None
    quota = {(q["policy"], q["rate"]): q["remaining"] for q in data["quota"]}
    # Beside this test's policies, tests.urls declares t-* ones on every identity kind.
    assert ("t-login", "3/m") in declared_ip()
    assert quota == {("login", "2/m"): 0, ("api", "3/m"): 3} | declared_ip()

    text = run("show", f"ip:{OFFICE}", "--hits", "2")
    assert "denials:  4 (login 4)" in text
    assert f"user:{alice.pk} (alice) x3" in text and f"user:{bob.pk} (bob) x3" in text
    assert "login 2/m (sliding_log): 0 of 2" in text
    assert "newest hits (2 of 6):" in text and "POST /login" in text


def test_show_of_an_identity_never_denied(engine: Engine) -> None:
    scripted(engine)
    quiet = User.objects.create_user("quiet")
    data = run_json("show", "user:quiet")
    assert data["identity"] == f"user:{quiet.pk}"
    assert data["offender"] is None and data["hits"] == [] and data["behind"] == []
    assert [(q["policy"], q["remaining"]) for q in data["quota"]] == [("api", 3), ("t-cbv", 2)]
    text = run("show", "user:quiet")
    assert "none recorded" in text and "nobody recorded" in text


# --------------------------------------------------------------------------- actions


def test_reset_forgets_the_record_by_default_and_keep_record_keeps_it(engine: Engine) -> None:
    """Like the dashboard's reset: the identity leaves the offenders list unless
    ``--keep-record``; ``--forget`` is still taken, and changes nothing."""
    scripted(engine)
    ip = Identity("ip", ATTACKER)
    login = current().get("login")
    assert login is not None
    assert engine.peek([Check(ip, login.limits)]).results[0].remaining == 0

    assert run("reset", f"ip:{ATTACKER}", "--policy", "login", "--keep-record") == (
        f"ip:{ATTACKER}: counters reset under login; its offender record is kept.\n"
    )
    assert engine.peek([Check(ip, login.limits)]).results[0].remaining == 2
    assert f"ip:{ATTACKER}" in {o.label for o in OffenderReader(engine).page().offenders}

    data = run_json("reset", f"ip:{ATTACKER}")
    assert data["policies"][:2] == ["api", "login"] and "t-login" in data["policies"]
    assert data == {
        "action": "reset",
        "identity": f"ip:{ATTACKER}",
        # Every enabled policy: the rows, then the defaults code declared (tests.urls'
        # t-* ones, and any an earlier test's URLconf declared).
        "policies": [spec.name for spec in get_registry().all()],
        "forget": True,
    }
    assert f"ip:{ATTACKER}" not in {o.label for o in OffenderReader(engine).page().offenders}
    assert OffenderReader(engine).detail(ip).hits == ()


def test_reset_forget_is_a_compatible_no_op(engine: Engine) -> None:
    scripted(engine)
    data = run_json("reset", f"ip:{ATTACKER}", "--forget")
    assert data["forget"] is True
    assert f"ip:{ATTACKER}" not in {o.label for o in OffenderReader(engine).page().offenders}
    with pytest.raises(CommandError, match="not allowed with argument"):
        run("reset", f"ip:{ATTACKER}", "--forget", "--keep-record")


def test_for_says_the_durations_it_takes() -> None:
    out = io.StringIO()
    parser = ratelimits.Command().create_parser("manage.py", "ratelimits")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["block"].print_help(out)
    help_text = " ".join(out.getvalue().split())
    assert "--for DURATION" in help_text
    assert "s, m, h or d, from 1s to 365d (90s, 30m, 1h, 7d)" in help_text


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--settings", "tests.settings", "--no-color", "-v", "2"],
        ["--settings", "tests.settings", "--no-color", "-v", "2", "status"],
        ["--no-color", "status", "--settings", "tests.settings", "--verbosity", "2"],
    ],
)
def test_djangos_options_may_follow_the_subcommand(argv: list[str]) -> None:
    # `manage.py ratelimits status --settings mysite.prod` was "unrecognized arguments".
    parser = ratelimits.Command().create_parser("manage.py", "ratelimits")
    options = vars(parser.parse_args(argv))
    assert (options["settings"], options["no_color"], options["verbosity"]) == (
        "tests.settings",
        True,
        2,
    )
    assert options["subcommand"] == "status"


def test_block_allow_and_lift(engine: Engine) -> None:
    scripted(engine)
    login = current().get("login")
    assert login is not None
    ip = Identity("ip", "192.0.2.1")

    assert "ip:192.0.2.1: blocked for 1h;" in run("block", "ip:192.0.2.1", "--for", "1h")
    mode, left, _ = Controls(engine).override(ip) or ("", 0, 0)
    assert mode == "blocked" and 3590 <= left <= 3600
    assert not engine.check([Check(ip, login.limits)]).allowed

    data = run_json("allow", "ip:192.0.2.1", "--for", "30m")
    assert data == {"action": "allow", "identity": "ip:192.0.2.1", "seconds": 1800, "idle": False}
    assert all(engine.check([Check(ip, login.limits)]).allowed for _ in range(5))

    lifted = run_json("lift", "ip:192.0.2.1")["lifted"]
    assert lifted["mode"] == "allowed" and lifted["seconds_left"] <= 1800
    assert Controls(engine).override(ip) is None
    assert "no block or allow-listing was in force" in run("lift", "ip:192.0.2.1")


def test_a_user_is_named_by_username_or_id_and_the_block_applies_to_it(engine: Engine) -> None:
    roamer = User.objects.create_user("sim-roamer")
    me = Identity("user", str(roamer.pk))
    assert run_json("block", "user:sim-roamer", "--for", "5m")["identity"] == f"user:{roamer.pk}"
    assert (Controls(engine).override(me) or ("", 0))[0] == "blocked"
    assert run_json("lift", f"user:{roamer.pk}")["lifted"]["mode"] == "blocked"
    assert Controls(engine).override(me) is None


@pytest.mark.parametrize(
    ("ident", "reason"),
    [
        ("user:sim-roamer", "no user has the id or username 'sim-roamer'"),
        ("user:99999999999999999999999", "no user has the id or username"),
        ("ip:garbage", "'garbage' is not an IP address or network"),
        ("header: ", "not only spaces"),
        ("key:" + "k" * 1001, "1 to 1000 characters"),
        ("device:phone", "'device' is not a kind of identity"),
        ("ip:203.0.113.0/24", "holds 256 address groups of /32"),
        ("ip_username:10.0.0.0/8 admin", "holds 16,777,216 address groups of /32"),
    ],
)
@pytest.mark.parametrize("action", [["block", "--for", "5m"], ["allow", "--for", "5m"], ["lift"]])
def test_an_identity_no_request_could_be_is_refused_with_the_reason(
    engine: Engine, ident: str, reason: str, action: list[str]
) -> None:
    with pytest.raises(CommandError, match=reason):
        run(action[0], ident, *action[1:])
    assert Controls(engine).active().overrides == ()


def test_an_address_means_the_group_the_limiter_counts(engine: Engine) -> None:
    run("block", "ip:2001:db8:1:2::7", "--for", "5m")
    assert Controls(engine).override(Identity("ip", "2001:db8:1:2::/64")) is not None
    assert run_json("lift", "ip:2001:db8:1:2::/64")["identity"] == "ip:2001:db8:1:2::/64"
    with override_settings(DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "IPV4_PREFIX": 24}):
        assert run_json("show", "ip:192.0.2.77")["identity"] == "ip:192.0.2.0/24"


# --------------------------------------------------------------------------- status


def test_status_describes_redis_and_the_index(engine: Engine) -> None:
    scripted(engine)
    data = run_json("status")
    cluster = isinstance(engine.client, RedisCluster)
    assert data["redis"]["topology"] == ("cluster" if cluster else "standalone")
    nodes = data["redis"]["nodes"]
    assert len(nodes) == (3 if cluster else 1)
    assert all(n["version"][0].isdigit() and n["ping_ms"] >= 0 for n in nodes)
    assert data["key_prefix"] == "rl" and data["shards"] == 64
    assert data["offenders_indexed"] == 4
    assert data["policies"] == len(current().all()) >= 2
    assert data["breaker_open"] is False
    text = run("status")
    assert text.startswith("limiting: on\nRedis: reachable, ")
    assert "offender index: 4 identities (all shards)" in text
    assert "circuit breaker: closed" in text
    assert data["metrics"] is False and "metrics: off" in text
    with override_settings(
        DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "METRICS": "prometheus"}
    ):
        assert run_json("status")["metrics"] == "prometheus"
        assert "metrics: prometheus" in run("status")


def switched_off() -> Any:
    """``DJANGO_RATELIMITS["ENABLED"] = False``: the master switch off."""
    return override_settings(DJANGO_RATELIMITS={**settings.DJANGO_RATELIMITS, "ENABLED": False})


def test_status_says_whether_limiting_is_switched_on(engine: Engine) -> None:
    assert run_json("status")["enabled"] is True
    assert "limiting: on\n" in run("status")
    with switched_off():
        assert run_json("status")["enabled"] is False
        text = run("status")
    assert 'limiting: OFF (DJANGO_RATELIMITS["ENABLED"] is False)' in text


@pytest.mark.parametrize(
    "args",
    [
        ["block", "ip:192.0.2.1", "--for", "1h"],
        ["allow", "ip:192.0.2.1", "--for", "1h"],
        ["override", "ip:192.0.2.1", "api", "9/h", "--for", "1h", "--reason", "r"],
    ],
    ids=lambda args: args[0],
)
def test_an_action_says_it_does_nothing_while_limiting_is_switched_off(
    engine: Engine, args: list[str]
) -> None:
    policy(name="api", rates="3/m", key="ip")
    with switched_off():
        text = run(*args)
    assert 'limiting is switched off (DJANGO_RATELIMITS["ENABLED"] is False)' in text
    assert "every check" not in text


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "nonsense"], "is not an identity: write kind:value"),
        (["show", "IP:192.0.2.1"], "'IP' is not a kind of identity"),
        (["block", "ip:not-an-address", "--for", "1h"], "is not an IP address or network"),
        (["block", "ip:192.0.2.1", "--for", "2y"], "is not a duration"),
        (["block", "ip:192.0.2.1"], "--for"),
        (["offenders", "--limit", "-1"], "is not a number"),
        (["offenders", "--kind", "IP"], "invalid choice: 'IP'"),
        (["offenders", "--kind", "ips"], "invalid choice: 'ips'"),
        (["reset", "ip:192.0.2.1", "--policy", "nope"], "no enabled policy is named 'nope'"),
        (["nonsense"], "invalid choice"),
    ],
)
def test_bad_arguments_are_clear_errors(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run(*args)


ACTIONS = [
    ["offenders"],
    ["show", "ip:192.0.2.1"],
    ["reset", "ip:192.0.2.1"],
    ["block", "ip:192.0.2.1", "--for", "1h"],
    ["lift", "ip:192.0.2.1"],
    ["status"],
]


@pytest.mark.parametrize("args", ACTIONS, ids=lambda args: args[0])
def test_an_unreachable_redis_is_a_clear_error(args: list[str]) -> None:
    with (
        override_settings(DJANGO_RATELIMITS={"REDIS": f"redis://127.0.0.1:{dead_port()}/0"}),
        pytest.raises(CommandError, match=r"^Redis failed: .*(refused|connecting)"),
    ):
        run(*args)


def test_on_the_command_line_a_failure_is_one_line_and_exit_status_1(tmp_path: Path) -> None:
    (tmp_path / "unreachable_settings.py").write_text(
        "from tests.settings import *  # noqa: F403\n"
        f"DJANGO_RATELIMITS = {{'REDIS': 'redis://127.0.0.1:{dead_port()}/0'}}\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "unreachable_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "ratelimits", "status"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("CommandError: Redis failed: ")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_on_the_command_line_a_policy_a_view_declares_is_known(
    tmp_path: Path, clean_standalone: Any
) -> None:
    """The command runs no system checks, so nothing else imports the URLconf: it does,
    and t-async, declared by a @ratelimit in tests/urls.py, can be asked for there. (On
    a flushed Redis: the offenders earlier tests of this process left are not this
    command's.)"""
    (tmp_path / "cli_settings.py").write_text(
        "from tests.settings import *  # noqa: F403\n"
        f"DJANGO_RATELIMITS = {{'REDIS': {clean_standalone.url!r}}}\n"
        "ROOT_URLCONF = 'tests.urls'\n"
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', "
        f"'NAME': {str(tmp_path / 'db.sqlite3')!r}}}}}\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "cli_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }

    def command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert command("migrate", "-v0").returncode == 0
    done = command("ratelimits", "offenders", "--policy", "t-async")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("0 identities denied in the last 1h: none to show.")
    typo = command("ratelimits", "offenders", "--policy", "t-asink")
    assert typo.returncode == 1
    assert "no policy is named 't-asink'" in typo.stderr and "t-async" in typo.stderr


def test_a_urlconf_that_fails_to_import_is_a_warning(engine: Engine) -> None:
    err = io.StringIO()
    with override_settings(ROOT_URLCONF="tests.no_such_urls"):
        call_command("ratelimits", "offenders", stdout=io.StringIO(), stderr=err)
    assert err.getvalue().startswith(
        "warning: ROOT_URLCONF could not be imported (ModuleNotFoundError: "
    )


def test_status_reports_what_a_full_redis_does(tmp_path: Path) -> None:
    with (
        redis_with(tmp_path, "noeviction", maxmemory="2mb") as server,
        override_settings(DJANGO_RATELIMITS={"REDIS": server.url}),
    ):
        (memory,) = run_json("status")["memory"]
        assert memory["maxmemory_policy"] == "noeviction" and memory["maxmemory"] == 2 << 20
        assert memory["fails_writes"] is True and memory["error"] is None
        verdict = "when full, writes fail and limits fail open: use allkeys-lru"
        assert f"maxmemory-policy noeviction ({verdict})" in run("status")
        with server.client() as client:
            client.config_set("maxmemory-policy", "allkeys-lru")
        assert "maxmemory-policy allkeys-lru (recommended)" in run("status")


def test_status_says_when_the_eviction_policy_cannot_be_read(tmp_path: Path) -> None:
    with (
        redis_with(tmp_path, "noeviction") as server,
        override_settings(DJANGO_RATELIMITS={"REDIS": blind_url(server)}),
    ):
        (memory,) = run_json("status")["memory"]
        text = run("status")
    assert memory["maxmemory_policy"] is None and "NoPermissionError" in memory["error"]
    assert "maxmemory-policy could not be read (INFO: NoPermissionError" in text


def test_status_does_not_call_a_cluster_node_asked_as_standalone_standalone(
    redis_cluster: RedisClusterHarness,
) -> None:
    """Without CLUSTER: True the node's own shards answer and the rest are MOVED: the
    status says so (check E011) instead of "standalone", and leaves the index unread."""
    redis_cluster.ensure_running()
    with override_settings(DJANGO_RATELIMITS={"REDIS": redis_cluster.url}):
        data = run_json("status")
        text = run("status")
    assert data["redis"]["topology"] == "cluster node as standalone"
    assert data["offenders_indexed"] is None
    assert "Redis: reachable, cluster node as standalone, 1 node(s):" in text
    assert "lacks CLUSTER: True" in text and "check E011" in text
    assert "standalone, 1" not in text.replace("as standalone, 1", "")


def test_shadow_hits_are_listed_and_shown_apart_from_denials(engine: Engine) -> None:
    policy(name="watch", rates="1/m", algorithm="fixed_window", key="ip", mode="shadow")
    watch = current().get("watch")
    assert watch is not None
    for _ in range(3):
        engine.check([Check(Identity("ip", OFFICE), watch.limits, "user:-|GET /", shadow=True)])
        engine.clock.advance(1.5)
    assert run_json("offenders")["offenders"] == []
    assert "0 identities denied" in run("offenders")
    (row,) = run_json("offenders", "--shadow")["offenders"]
    assert (row["identity"], row["denials"], row["by_policy"]) == (f"ip:{OFFICE}", 2, {"watch": 2})
    data = run_json("show", f"ip:{OFFICE}")
    assert data["offender"] is None and data["would_deny"]["denials"] == 2
    assert [h["outcome"] for h in data["hits"]] == ["would have been denied"] * 2
    assert [h["policies"] for h in data["hits"]] == [{"watch": "would have been denied"}] * 2
    text = run("show", f"ip:{OFFICE}")
    assert "denials:  none recorded" in text
    assert "would have been denied (shadow mode, which refuses nothing): 2 (watch 2)" in text


def test_a_block_no_policy_applies_says_so(engine: Engine) -> None:
    data = run_json("block", "header:LEAKED-KEY", "--for", "5m")
    assert data["idle"] is True
    assert "No enabled policy counts header identities" in run("allow", "header:K", "--for", "5m")
    assert run_json("block", "ip:203.0.113.7", "--for", "5m")["idle"] is False
