"""The package's data migrations change the rows of the database being migrated
(``migrate --database=...``, a project whose router puts the package's tables in a
database of their own), not the default one's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=[
        "django.contrib.contenttypes", "django.contrib.auth", "django_ratelimits",
    ],
    DATABASES={
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
        "limits": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
    },
    USE_TZ=True,
)
django.setup()
from django.core.management import call_command
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

limits = connections["limits"]
call_command("migrate", "django_ratelimits", "0003", database="limits", verbosity=0)
before = [("django_ratelimits", "0003_policy_identity_budget")]
old = MigrationExecutor(limits).loader.project_state(before).apps.get_model(
    "django_ratelimits", "Policy"
)
old.objects.using("limits").create(name="ticked", rates="5/m", record_metadata=True)
call_command("migrate", "django_ratelimits", "0004", database="limits", verbosity=0)
with limits.cursor() as cursor:
    cursor.execute("SELECT name, record_metadata FROM django_ratelimits_policy")
    print(cursor.fetchall())
"""


def test_a_data_migration_changes_the_database_being_migrated() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    # Before, the migration updated the default database, which has no such table.
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('ticked', 'every')]"
