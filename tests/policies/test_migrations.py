"""Migrations that change what a stored policy means."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("django_ratelimits", "0003_policy_identity_budget")]
AFTER = [("django_ratelimits", "0004_policy_record_metadata_choice")]


@pytest.mark.django_db(transaction=True)
def test_record_who_ticked_becomes_every_hit_and_unticked_becomes_denials() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("django_ratelimits", "Policy")
    old.objects.create(name="ticked", rates="5/m", record_metadata=True)
    old.objects.create(name="unticked", rates="5/m", record_metadata=False)
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps.get_model("django_ratelimits", "Policy")
    stored = dict(new.objects.values_list("name", "record_metadata"))
    assert stored == {"ticked": "every", "unticked": "denials"}
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)  # and back: only "every" was ticked
    old = executor.loader.project_state(BEFORE).apps.get_model("django_ratelimits", "Policy")
    assert dict(old.objects.values_list("name", "record_metadata")) == {
        "ticked": True,
        "unticked": False,
    }
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_reset_on_success_is_cleared_where_it_means_nothing_now() -> None:
    """A success no longer clears a client IP's failed-login counters: migration 0012
    clears the box on policies counting by ip alone, and keeps it on the others."""
    before = [("django_ratelimits", "0011_tiers_and_overrides")]
    after = [("django_ratelimits", "0012_help_methods_reset_overrides")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("django_ratelimits", "Policy")
    for name, key in [("by-ip", "ip"), ("by-username", "username"), ("both", "ip_and_username")]:
        old.objects.create(
            name=name, rates="3/15m", counts="failed_logins", key=key, reset_on_success=True
        )
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    new = executor.loader.project_state(after).apps.get_model("django_ratelimits", "Policy")
    stored = dict(new.objects.values_list("name", "reset_on_success"))
    assert stored == {"by-ip": False, "by-username": True, "both": True}
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
