"""``python -m devtools.simulate``: demo traffic through the rate-limited URLs of the site
that ``DJANGO_SETTINGS_MODULE`` names, so that its offender dashboard has rows.

It writes to that site: it creates the users ``sim-*`` in its database
(:data:`devtools.simulate.traffic.USERS`) and leaves counters and offender records in
its Redis. So it refuses to run unless the site has ``DEBUG`` on or ``--yes`` is given,
and its report names the users it created. An unreachable Redis stops it before any
request is sent (the traffic would only be let through, fail-open).

::

    DJANGO_SETTINGS_MODULE=demo_project.demo_settings python -m devtools.simulate --seconds 6
    python -m devtools.simulate --requests 500 --json --yes   # DEBUG off: say so explicitly
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import django
from django.apps import apps
from django.conf import settings
from redis.exceptions import RedisClusterException, RedisError

PROG = "python -m devtools.simulate"


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 3600:  # NaN fails both comparisons
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from 0 to 3600")
    return seconds


def _count(text: str) -> int:
    if not text.isdigit() or int(text) > 100_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 100000")
    return int(text)


def parser() -> argparse.ArgumentParser:
    command = argparse.ArgumentParser(
        prog=PROG,
        description="Send demo traffic through this site's rate-limited URLs. It creates "
        "users named sim-* in the site's database (the first time) and leaves "
        "counters and offender records in its Redis: it runs only when DEBUG is on or "
        "--yes is given.",
    )
    command.add_argument("--seconds", type=_seconds, default=10.0, help="at most (default 10)")
    command.add_argument("--requests", type=_count, default=5000, help="at most (default 5000)")
    command.add_argument("--json", action="store_true", help="machine-readable output")
    command.add_argument(
        "--yes",
        action="store_true",
        help="run although DEBUG is off (a staging site): create the sim-* users there",
    )
    return command


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not apps.ready:
        django.setup()
    from devtools.simulate.traffic import USERS, NoTargets, run
    from django_ratelimits.engine import get_engine
    from django_ratelimits.exceptions import BackendError

    if not (settings.DEBUG or args.yes):
        print(
            f"{PROG}: refused: DEBUG is off, so this may be a production site. This command "
            f"creates the users {', '.join(USERS)} in its database and sends traffic that "
            "leaves offender records in its Redis. Pass --yes to do that anyway.",
            file=sys.stderr,
        )
        return 2
    try:
        get_engine().now_us()  # an unreachable Redis stops here, not after fail-open traffic
        summary = run(seconds=args.seconds, requests=args.requests)
    except NoTargets as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except (BackendError, RedisError, RedisClusterException) as exc:
        print(f"{PROG}: Redis failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary.as_dict(), indent=2) if args.json else summary.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
