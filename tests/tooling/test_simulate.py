"""``python -m devtools.simulate``: demo traffic that refuses to touch a site with DEBUG
off unless told, says which users it creates, and is not part of the installed package."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import override_settings

import django_ratelimits
from devtools.redis_harness import dead_port
from devtools.simulate.__main__ import main
from devtools.simulate.traffic import USERS
from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.offenders import OffenderReader
from django_ratelimits.models import Policy
from django_ratelimits.policies import get_registry

pytestmark = pytest.mark.django_db

# Runs end by their number of requests, not by time, and the limits are per hour (the
# views' own per minute): what is limited is the same however fast the machine sends.
ENDLESS = ("--seconds", "3600")


def simulate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Exit status, standard output and standard error of one run."""
    status = main(args)
    out, err = capsys.readouterr()
    return status, out, err


def simulate_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    status, out, err = simulate(capsys, *args, "--json")
    assert status == 0, err
    return json.loads(out)


@pytest.fixture
def api_policy(site_redis: Any) -> None:
    Policy.objects.create(
        name="api", rates="5/h", path="^/api/", key="ip_and_user", record_metadata="every"
    )
    get_registry().refresh()


@override_settings(DEBUG=True)
def test_simulate_sends_traffic_through_the_site(
    api_policy: None, capsys: pytest.CaptureFixture[str]
) -> None:
    data = simulate_json(capsys, "--requests", "160", *ENDLESS)
    assert data["requests"] == 160 and 0 < data["limited"] < data["requests"]
    assert data["denials"]["api"] > 0
    targets = {(t["method"], t["path"]): t["policies"] for t in data["targets"]}
    assert targets[("GET", "/api/hello")] == ["api"]
    assert targets[("POST", "/login")] == ["t-login"]
    assert not any(path.startswith("/admin/") and path != "/admin/login/" for _, path in targets)
    visitors = {v["visitor"]: v for v in data["visitors"]}
    assert visitors["regular 192.0.2.10"]["limited"] < visitors["attacker 203.0.113.66"]["limited"]

    office = OffenderReader(get_engine()).detail(Identity("ip", "198.51.100.10"))
    assert office.offender is not None and office.offender.by_policy["api"] > 0
    sim_users = User.objects.filter(username__startswith="sim-office-")
    assert {who for who, _ in office.behind()} == {f"user:{u.pk}" for u in sim_users}
    assert len(sim_users) == 6

    assert simulate_json(capsys, "--requests", "30", *ENDLESS)["requests"] == 30
    status, text, _ = simulate(capsys, "--requests", "10", *ENDLESS)
    assert status == 0 and text.startswith("10 requests in ") and "by visitor:" in text
    assert simulate_json(capsys, "--seconds", "0.3")["seconds"] >= 0.3  # stops by time too


@override_settings(DEBUG=True)
def test_the_report_names_the_users_a_run_created(
    api_policy: None, capsys: pytest.CaptureFixture[str]
) -> None:
    User.objects.create(username="sim-roamer")
    first = simulate_json(capsys, "--requests", "20", *ENDLESS)
    assert sorted(first["created_users"]) == sorted(set(USERS) - {"sim-roamer"})
    assert User.objects.filter(username__startswith="sim-").count() == len(USERS)
    _, text, _ = simulate(capsys, "--requests", "10", *ENDLESS)
    assert "users created: none (they existed)" in text


@override_settings(DEBUG=False)
def test_with_debug_off_it_refuses_and_creates_nobody_unless_told_yes(
    api_policy: None, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = simulate(capsys, "--requests", "20", *ENDLESS)
    assert status == 2 and out == ""
    assert "DEBUG is off" in err and "--yes" in err
    assert all(name in err for name in USERS)  # it says which users it would create
    assert not User.objects.filter(username__startswith="sim-").exists()
    assert OffenderReader(get_engine()).detail(Identity("ip", "198.51.100.10")).offender is None

    assert simulate_json(capsys, "--requests", "20", "--yes", *ENDLESS)["requests"] == 20
    assert User.objects.filter(username__startswith="sim-").count() == len(USERS)


def test_its_help_says_that_it_creates_users(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "creates users named sim-*" in help_text and "--yes" in help_text


@override_settings(DEBUG=True)
def test_simulate_needs_a_limited_route(
    site_redis: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with override_settings(ROOT_URLCONF="demo_project.urls"):
        status, _, err = simulate(capsys, "--seconds", "1")
    assert status == 1 and "no route of this site is limited" in err


@pytest.mark.parametrize(
    "args",
    [
        ["--seconds", "nan"],
        ["--seconds", "inf"],
        ["--seconds", "0"],
        ["--seconds", "3601"],
        ["--requests", "-1"],
        ["--requests", "100001"],
        ["--requests", "1e9"],
    ],
)
def test_unbounded_or_malformed_runs_are_refused(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(args)
    assert stop.value.code == 2
    assert "is not a number" in capsys.readouterr().err


@override_settings(DEBUG=True)
def test_an_unreachable_redis_stops_it_before_any_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with override_settings(DJANGO_RATELIMITS={"REDIS": f"redis://127.0.0.1:{dead_port()}/0"}):
        status, out, err = simulate(capsys, "--requests", "20")
    assert status == 1 and out == ""
    assert "Redis failed" in err and "Traceback" not in err
    assert not User.objects.filter(username__startswith="sim-").exists()


def test_the_installed_command_has_no_simulate_subcommand() -> None:
    with pytest.raises(CommandError, match="invalid choice: 'simulate'"):
        call_command("ratelimits", "simulate")


def test_the_package_imports_no_development_tooling() -> None:
    """The wheel ships django_ratelimits alone: an import of devtools, tests or
    benchmarks from it would fail on every installed site."""
    package = Path(django_ratelimits.__file__).parent
    offenders = []
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [
                f"{source.relative_to(package)}: {name}"
                for name in names
                if name.split(".")[0] in {"devtools", "tests", "benchmarks"}
            ]
    assert offenders == []
