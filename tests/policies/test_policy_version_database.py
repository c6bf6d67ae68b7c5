"""An edit changes the version stamp of the database it was written to.

A project may keep the package's rows in a database of its own, or write them with
``.using(alias)`` / ``save(using=alias)``: workers reading that database must notice the
edit (``PolicyVersion.current()`` read there changes), not the router's default one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from django_ratelimits.models import (
    BlockedNetwork,
    Policy,
    PolicyTier,
    PolicyVersion,
    RateOverride,
)
from django_ratelimits.policies import PolicyRegistry

OTHER = "other"
BOTH = ["default", OTHER]


class ReadsOther:
    """A router that reads the package's rows from ``other`` and gives no opinion on
    writes (they go to ``default`` unless a write names its database)."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return OTHER if model._meta.app_label == "django_ratelimits" else None


def stamps() -> tuple[int | None, int | None]:
    """The stamp on ``default``, then on ``other`` (None: never changed there)."""
    default, other = (
        PolicyVersion.objects.using(alias).filter(pk=1).values_list("stamp", flat=True).first()
        for alias in BOTH
    )
    return default, other


@pytest.fixture
def reads_other() -> Iterator[None]:
    with override_settings(DATABASE_ROUTERS=[f"{__name__}.ReadsOther"]):
        yield


def _saved() -> None:
    policy = Policy(name="api", rates="1/m", path="^/api/")
    policy.save(using=OTHER)


def _created() -> None:
    Policy.objects.using(OTHER).create(name="api", rates="1/m", path="^/api/")


def _updated() -> None:
    Policy.objects.using(OTHER).filter(name="seed").update(rates="2/m")


def _bulk_updated() -> None:
    rows = list(Policy.objects.using(OTHER).filter(name="seed"))
    rows[0].rates = "3/m"
    Policy.objects.using(OTHER).bulk_update(rows, ["rates"])


def _deleted() -> None:
    Policy.objects.using(OTHER).get(name="seed").delete()


def _queryset_deleted() -> None:
    Policy.objects.using(OTHER).filter(name="seed").delete()


def _tier_added() -> None:
    seed = Policy.objects.using(OTHER).get(name="seed")
    PolicyTier(policy=seed, match="group", name="staff", rates="100/m").save(using=OTHER)


def _override_added() -> None:
    RateOverride.objects.using(OTHER).create(
        policy=Policy.objects.using(OTHER).get(name="seed"),
        identity_kind="ip",
        identity_value="203.0.113.7",
        rates="100/m",
        expires_at=timezone.now() + timedelta(hours=1),
        reason="partner",
    )


def _network_blocked() -> None:
    BlockedNetwork.objects.using(OTHER).create(network="198.51.100.0/24", reason="abuse")


EDITS: dict[str, Callable[[], None]] = {
    "save(using=)": _saved,
    "using().create": _created,
    "using().update": _updated,
    "using().bulk_update": _bulk_updated,
    "delete of a row read there": _deleted,
    "using().delete": _queryset_deleted,
    "tier saved there": _tier_added,
    "override created there": _override_added,
    "network blocked there": _network_blocked,
}


@pytest.mark.django_db(databases=BOTH)
@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_an_edit_changes_the_stamp_of_the_database_it_went_to(
    edit: Callable[[], None],
) -> None:
    Policy.objects.using(OTHER).create(name="seed", rates="1/m")
    before = stamps()
    edit()
    default, other = stamps()
    assert other is not None and other != before[1]
    assert default == before[0]  # the default database holds no edit: its stamp stays


@pytest.mark.django_db(databases=BOTH)
@pytest.mark.usefixtures("reads_other")
def test_a_worker_reading_the_database_written_reloads_the_edit() -> None:
    registry = PolicyRegistry()
    registry.refresh()
    assert registry.get("api") is None
    # Before, the stamp changed on "default": the worker, reading "other", kept its
    # policies until something else changed the stamp there (an edit never applied).
    Policy(name="api", rates="1/m", path="^/api/").save(using=OTHER)
    registry.refresh()
    spec = registry.get("api")
    assert spec is not None and [str(rate) for rate in spec.rates] == ["1/m"]
    Policy.objects.using(OTHER).filter(name="api").update(enabled=False)
    registry.refresh()
    assert registry.get("api") is None


@pytest.mark.django_db
def test_an_edit_without_a_database_named_changes_the_routers_stamp() -> None:
    before = PolicyVersion.current()
    Policy.objects.create(name="api", rates="1/m")
    assert PolicyVersion.current() not in (None, before)
