"""Seed the demo's example policies (left alone if a row of that name exists)."""

import secrets

from django.db import migrations

POLICIES = [
    {
        "name": "api",
        "description": (
            "The JSON endpoints /api/orders and /api/hello; /api/drf/ping is left to DRF's "
            "PolicyThrottle, which limits it with this policy (throttle_scope = 'api'), so "
            "all three share one quota. (Path patterns are RE2: no lookahead to say "
            "'all of /api/ but /api/drf/'.)"
        ),
        "algorithm": "sliding_window",
        "rates": "10/s, 120/m",
        "key": "ip_and_user",
        "path": r"^/api/(?:orders|hello)",
        "record_metadata": "every",
        "priority": 10,
    },
    {
        "name": "login",
        "description": (
            "The /login/ form. The view says @ratelimit('login', rate='5/m', ...); "
            "this row wins over those defaults and turns on recording who."
        ),
        "algorithm": "sliding_log",
        "rates": "5/m",
        "key": "ip",
        "methods": "POST",
        "record_metadata": "every",
    },
    {
        "name": "orders-watch",
        "description": (
            "Shadow mode: counts /api/orders at 3/m and logs every would-be denial, "
            "but never blocks. Switch it to enforce in admin to see it bite."
        ),
        "mode": "shadow",
        "algorithm": "fixed_window",
        "rates": "3/m",
        "key": "ip",
        "path": r"^/api/orders",
        "record_metadata": "every",
    },
    {
        "name": "admin-login",
        "description": (
            "Fail closed: while Redis is down, POSTs to the admin login answer 503 "
            "instead of going through unlimited."
        ),
        "algorithm": "gcra",
        "rates": "10/m",
        "burst": 3,
        "key": "ip",
        "path": r"^/admin/login/",
        "methods": "POST",
        "fail_closed": True,
    },
]


def bump(apps):
    # Historical models send no signals to the real receivers: change the stamp here
    # so that running workers reload.
    apps.get_model("django_ratelimits", "PolicyVersion").objects.update_or_create(
        pk=1, defaults={"stamp": secrets.randbits(62)}
    )


def seed(apps, schema_editor):
    policy = apps.get_model("django_ratelimits", "Policy")
    for fields in POLICIES:
        policy.objects.get_or_create(name=fields["name"], defaults=fields)
    bump(apps)


def unseed(apps, schema_editor):
    policy = apps.get_model("django_ratelimits", "Policy")
    policy.objects.filter(name__in=[fields["name"] for fields in POLICIES]).delete()
    bump(apps)


class Migration(migrations.Migration):
    dependencies = [("django_ratelimits", "0004_policy_record_metadata_choice")]

    operations = [migrations.RunPython(seed, unseed)]
