"""``cases.py`` under each user model of ``tests.custom_users``, a pytest process each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("model", ["UUIDUser", "EmailUser", "CharPkUser"])
def test_the_package_under_a_custom_user_model(model: str) -> None:
    env = {**os.environ, "RATELIMITS_TEST_USER_MODEL": model}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "--ds=tests.custom_user_settings",
            "tests/custom_users/cases.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
