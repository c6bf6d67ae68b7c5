"""A project's own admin site at its own URL: ``BackstageSite`` (an ``AdminSite``
subclass named "backstage", not ``admin.site``) at ``/backstage/``, with the package's
model admins registered on it as docs/deployment.md shows, and the test views."""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.urls import include, path

from django_ratelimits.admin import OffenderDashboardAdmin, PolicyAdmin
from django_ratelimits.admin_overrides import RateOverrideAdmin
from django_ratelimits.models import BlockedNetwork, OffenderDashboard, Policy, RateOverride
from django_ratelimits.network_admin import BlockedNetworkAdmin


class BackstageSite(AdminSite):
    site_header = "Backstage"


site = BackstageSite(name="backstage")
site.register(Policy, PolicyAdmin)
site.register(OffenderDashboard, OffenderDashboardAdmin)
site.register(BlockedNetwork, BlockedNetworkAdmin)
site.register(RateOverride, RateOverrideAdmin)

urlpatterns = [path("backstage/", site.urls), path("", include("tests.urls"))]
