"""The package's pages as a production site serves them (docs/deployment.md, "Admin
and static files in production"): hashed static files from ``collectstatic`` with
``ManifestStaticFilesStorage``, a Content-Security-Policy without ``unsafe-inline``, and
a project's own ``AdminSite`` at its own URL, under a script prefix.

The test settings have ``DEBUG = False``, as production, where a template that names a
static file missing from the manifest raises ``ValueError``: a 500 that the default
storage of development and tests never shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import get_script_prefix, reverse, set_script_prefix

from django_ratelimits.engine import Identity, get_engine
from django_ratelimits.engine.controls import Controls
from django_ratelimits.models import Policy
from django_ratelimits.policies import current
from tests.dashboard.test_dashboard import ATTACKER, act, detail_url, scripted

pytestmark = [
    pytest.mark.django_db,
    # What is tested is Django's side; the cluster would only run it twice.
    pytest.mark.parametrize("redis_client", ["standalone"], indirect=True),
]
MANIFEST = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.ManifestStaticFilesStorage"},
}


@pytest.fixture(scope="module")
def static_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``collectstatic`` once, as a deploy runs it: the files and their manifest."""
    root = tmp_path_factory.mktemp("static")
    with override_settings(STORAGES=MANIFEST, STATIC_ROOT=str(root)):
        call_command("collectstatic", interactive=False, verbosity=0)
    return root


class Inline(HTMLParser):
    """What a Content-Security-Policy without ``unsafe-inline`` refuses: inline scripts
    and styles, ``style`` attributes, event handler attributes, ``javascript:`` URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script" and "src" not in named and named.get("type") != "application/json":
            self.found.append("<script> without src")
        if tag == "style":
            self.found.append("<style>")
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.found.append(f"{name}= on <{tag}>")
            if (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"{name}=javascript: on <{tag}>")


def inline(html: str) -> list[str]:
    parser = Inline()
    parser.feed(html)
    return parser.found


def test_every_page_renders_from_the_manifest_and_needs_no_inline_code(
    site_redis: Any, admin_client: Client, django_user_model: Any, settings: Any, static_root: Path
) -> None:
    settings.STORAGES = MANIFEST
    settings.STATIC_ROOT = str(static_root)
    scripted(django_user_model)
    act(admin_client, kind="ip", value=ATTACKER, action="block", seconds="300")
    policy = Policy.objects.get(name="hello")
    asked = {"kind": "ip", "value": ATTACKER, "action": "lift"}
    confirm = admin_client.post(reverse("admin:django_ratelimits_offender_action"), asked)
    pages = {
        "confirm": confirm,
        **{
            name: admin_client.get(url)
            for name, url in {
                "index": reverse("admin:index"),
                "policies": reverse("admin:django_ratelimits_policy_changelist"),
                "policy add": reverse("admin:django_ratelimits_policy_add"),
                "policy change": reverse("admin:django_ratelimits_policy_change", args=[policy.pk]),
                "offenders": reverse("admin:django_ratelimits_offenders"),
                "identity": detail_url("ip", ATTACKER),
                "no identity": detail_url("ip", "garbage"),
                "blocks": reverse("admin:django_ratelimits_blocks"),
                "overrides": reverse("admin:django_ratelimits_rateoverride_changelist"),
                "override add": reverse("admin:django_ratelimits_rateoverride_add"),
                "networks": reverse("admin:django_ratelimits_blockednetwork_changelist"),
                "network add": reverse("admin:django_ratelimits_blockednetwork_add"),
            }.items()
        },
    }
    statuses = {name: response.status_code for name, response in pages.items()}
    assert statuses == {**dict.fromkeys(pages, 200), "no identity": 404}
    html = {name: response.content.decode() for name, response in pages.items()}
    # The package's own files come hashed from the manifest, as a CDN may cache them.
    assert re.search(r'/static/django_ratelimits/dashboard\.[0-9a-f]{12}\.css"', html["offenders"])
    assert re.search(r'/static/django_ratelimits/dashboard\.[0-9a-f]{12}\.js"', html["offenders"])
    assert re.search(r'/static/django_ratelimits/admin\.[0-9a-f]{12}\.css"', html["policies"])
    # The live refresh swaps in HTML from the JSON endpoint: no inline code there either.
    swapped = admin_client.get(reverse("admin:django_ratelimits_offenders_json")).json()["html"]
    found = {name: inline(page) for name, page in {**html, **swapped}.items()}
    assert {name: code for name, code in found.items() if code} == {}


@pytest.fixture
def backstage(site_redis: Any, settings: Any) -> Iterator[None]:
    """``tests.backstage_urls`` served under the script prefix ``/app``: what Django's
    WSGI and ASGI handlers set for each request (the test client does not)."""
    settings.ROOT_URLCONF = "tests.backstage_urls"
    settings.FORCE_SCRIPT_NAME = "/app"
    before = get_script_prefix()
    set_script_prefix("/app/")
    try:
        yield
    finally:
        set_script_prefix(before)


def below(url: str) -> str:
    """What the client asks for ``url`` (a path under ``/app``): the path below the prefix."""
    assert url.startswith("/app/"), url
    return url.removeprefix("/app")


def test_a_custom_admin_site_at_its_own_url_under_a_prefix_keeps_its_links_and_way_back(
    backstage: None, admin_client: Client
) -> None:
    # Every request goes through one policy, the admin's included: a block decides them.
    Policy.objects.create(name="everything", rates="1000/m", key="ip", path="^/")
    current().refresh()
    entry = admin_client.get("/backstage/django_ratelimits/offenderdashboard/")
    offenders = "/app/backstage/django_ratelimits/policy/offenders/"
    assert entry.status_code == 302 and entry["Location"] == offenders
    assert "offenderdashboard" in admin_client.get("/backstage/").content.decode()
    page = admin_client.get(below(offenders)).content.decode()
    # Every link of the page but admin's "View site" and the static files (STATIC_URL is
    # the project's: "/static/" here) stays in the backstage, not in admin.site's /admin/.
    links = set(re.findall(r'(?:href|action|data-url)="(/[^"]*)"', page)) - {"/app"}
    ours = {link for link in links if not link.startswith("/static/")}
    assert len(ours) > 10 and all(link.startswith("/app/backstage/") for link in ours)
    tool = admin_client.get("/backstage/django_ratelimits/policy/").content.decode()
    assert f'href="{offenders}" id="offenders-link"' in tool

    action = reverse("backstage:django_ratelimits_offender_action")
    assert action == offenders + "action/"
    fields = {"kind": "ip", "value": "203.0.113.7", "action": "block", "seconds": "300"}
    done = admin_client.post(below(action), {**fields, "confirm": "on"})
    assert done.status_code == 302 and done["Location"].startswith(offenders + "identity/")
    assert Controls(get_engine()).override(Identity("ip", "203.0.113.7")) is not None

    # The blocked address: refused on the site, not at the backstage's login page.
    anonymous = Client(REMOTE_ADDR="203.0.113.7")
    assert anonymous.get("/api/hello").status_code == 429
    assert anonymous.get("/backstage/login/").status_code == 200
    # A superuser there still reaches the dashboard, and lifts the block from it.
    admin_client.defaults["REMOTE_ADDR"] = "203.0.113.7"
    assert admin_client.get(below(offenders + "blocks/")).status_code == 200
    lift = {"kind": "ip", "value": "203.0.113.7", "action": "lift", "back": "blocks"}
    lifted = admin_client.post(below(action), {**lift, "confirm": "on"})
    assert lifted.status_code == 302 and lifted["Location"] == offenders + "blocks/"
    assert anonymous.get("/api/hello").status_code == 200
