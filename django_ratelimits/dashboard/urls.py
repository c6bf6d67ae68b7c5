"""The dashboard's URLs, mounted under the policy admin by ``PolicyAdmin.get_urls``.

With admin at ``/admin/``: ``/admin/django_ratelimits/policy/offenders/`` (the
page), ``.../offenders/json/``, ``.../offenders/identity/?kind=ip&value=...``
``.../offenders/action/`` (POST) and ``.../offenders/blocks/`` (the blocks
and allow-listings in force). Every view goes through
``site.admin_view`` (active staff only, anonymous users to the login page,
CSRF, never cached) and then checks its own permission.
"""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.urls import URLPattern, path

from django_ratelimits.dashboard.views.actions import offender_action
from django_ratelimits.dashboard.views.blocks import blocks_page
from django_ratelimits.dashboard.views.identity import offender_detail
from django_ratelimits.dashboard.views.offenders import offenders_json, offenders_page


def dashboard_urls(site: AdminSite) -> list[URLPattern]:
    extra = {"site": site}
    return [
        path(
            "offenders/",
            site.admin_view(offenders_page),
            extra,
            name="django_ratelimits_offenders",
        ),
        path(
            "offenders/json/",
            site.admin_view(offenders_json),
            extra,
            name="django_ratelimits_offenders_json",
        ),
        path(
            "offenders/identity/",
            site.admin_view(offender_detail),
            extra,
            name="django_ratelimits_offender",
        ),
        path(
            "offenders/action/",
            site.admin_view(offender_action),
            extra,
            name="django_ratelimits_offender_action",
        ),
        path(
            "offenders/blocks/",
            site.admin_view(blocks_page),
            extra,
            name="django_ratelimits_blocks",
        ),
    ]
