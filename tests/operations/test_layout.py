"""The package's layers, as a user of its modules meets them (docs/development.md, "Layers").

`lint-imports` (in `make test`) keeps every arrow pointing down; these tests
pin what that buys a project: the request path loads no system checks, a
``PolicySpec`` can be named before Django's apps are ready, and every public
error is the one its layer raises.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from django_ratelimits import decide, exceptions
from django_ratelimits.engine import errors as engine_errors
from django_ratelimits.errors import RateLimitsError

ROOT = Path(__file__).resolve().parents[2]


def fresh_python(code: str, *, settings: bool = True) -> str:
    """Run ``code`` in a new interpreter with the test settings (or none), Django not
    set up."""
    env = {"PATH": "/usr/bin:/bin"}
    if settings:
        env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_working_out_who_a_request_is_loads_no_system_check() -> None:
    loaded = fresh_python(
        "import sys\n"
        "import django_ratelimits.identity\n"
        "print(sorted(m for m in sys.modules if m.startswith('django_ratelimits.checks')))"
    )
    assert loaded == "[]"


def test_a_policy_spec_can_be_named_before_djangos_apps_are_ready() -> None:
    # An AppConfig module is imported before the models: it may name a PolicySpec.
    built = fresh_python(
        "from django_ratelimits.policies import KeyKind, PolicySpec\n"
        "from django_ratelimits.rates import parse_rates\n"
        "spec = PolicySpec('api', parse_rates('10/s'), key=KeyKind.USER, path='^/api/')\n"
        "print(spec.name, spec.key, bool(spec.path_re.search('/api/x')))"
    )
    assert built == "api user True"


def test_every_public_error_is_the_one_its_layer_raises() -> None:
    assert exceptions.BackendError is engine_errors.BackendError
    assert exceptions.RateLimited is decide.RateLimited
    assert exceptions.RateLimitsError is RateLimitsError
    for error in (exceptions.BackendError, exceptions.RateLimited, exceptions.RateParseError):
        assert issubclass(error, RateLimitsError)


def test_rates_are_parsed_without_django_settings() -> None:
    # The engine and the benchmarks parse rates where no settings are configured; the
    # error reasons are marked for translation without asking Django's settings.
    code = (
        "from django_ratelimits.rates import parse_rates\n"
        "from django_ratelimits.errors import RateParseError\n"
        "print([r.period for r in parse_rates('10/s, 100/h')])\n"
        "try:\n"
        "    parse_rates('10/x')\n"
        "except RateParseError as error:\n"
        "    print(error)\n"
    )
    out = fresh_python(code, settings=False).splitlines()
    assert out[0] == "[1, 3600]"
    assert "unknown unit" in out[1]
