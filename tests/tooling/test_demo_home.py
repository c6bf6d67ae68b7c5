"""The demo's home page points to the Offenders dashboard (issue 11, finding 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RENDER = """
import django
django.setup()
from django.template.loader import render_to_string
print(render_to_string("shop/home.html", {"base": "http://demo", "redis_port": 1, "policies": []}))
"""


def test_the_home_page_links_to_the_offenders_dashboard() -> None:
    # The demo's own settings (its shop app, its URLs), in a process of their own.
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "demo_project.demo_settings"}
    html = subprocess.run(
        [sys.executable, "-c", RENDER],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert '<a href="/admin/django_ratelimits/policy/offenders/" id="offenders-link">' in html
    assert "Offenders dashboard" in html
