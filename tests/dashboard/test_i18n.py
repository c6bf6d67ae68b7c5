"""Every text a person reads on the package's pages is translatable.

The pages are rendered with a translation that wraps whatever it translates in
markers (``⟦...⟧``): Django's own strings and the package's alike, through
``gettext``, ``ngettext``, ``pgettext`` and the template tags. A message's placeholders
stay outside its marks, so what fills them in must be data or translated itself. What
is left of a page's visible text once the marked parts are taken out must be the data
the test put there (identities, users, policy names, addresses, paths, what a form was
given), numbers and punctuation: a word left over is a text no catalog could translate
(an English f-string, a template's text outside ``{% translate %}``, a gettext called
at import time, a reason or a label filled in untranslated).

Covered: the offender dashboard (its pages, the JSON's parts and errors, the
confirmations, the messages after an action), the admin pages of the package's
models (lists, filters, forms with their errors and the reasons after their leads:
the rate grammar's, the tier parser's, RE2's quoted as its own, the policy preview, the
messages of actions) and the refusal pages (429, the blocklist's 403, the fail-closed
503). Each case also asserts the text it is there to show, and each page must hold
marked strings: a page the translation never reached, or a case that shows something
else, cannot pass. The live-update status, which the page's script writes, is looked at
in Chromium: its translated sentences arrive whole, with placeholders the script fills
in.

Not covered: RE2's own words, which come from the library in English (the sentence
around them says they are RE2's); system checks and the management command, which
speak English on purpose; admin's "Recent actions", which shows the sentence the
dashboard stored in English (``LogEntry.object_repr``, see docs/dashboard.md).
"""

from __future__ import annotations

import gettext as gettext_module
import json
import re
from collections.abc import Iterable, Iterator
from html import unescape
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import trans_real

from django_ratelimits import key_functions
from django_ratelimits.engine import Identity
from django_ratelimits.models import BlockedNetwork, Policy, PolicyTier, RateOverride
from django_ratelimits.offenders import RECORDED_KINDS, Offenders
from django_ratelimits.policies import current
from django_ratelimits.policies.matching import PathPattern, PatternError
from django_ratelimits.policies.parse import HTTP_METHODS
from tests.dashboard.browsing import open_offenders

OPEN, CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧: never escaped by HTML, never in the data
UNMARKED = str.maketrans("", "", OPEN + CLOSE)
MARKED = re.compile(f"{OPEN}[^{OPEN}{CLOSE}]*{CLOSE}")
# A %-format placeholder (not "%%"): what ``message % params`` fills in.
PLACEHOLDER = re.compile(r"%(?:\(\w+\))?[-#0 +]*\d*(?:\.\d+)?[sdifr]")
WORD = re.compile(r"[^\W\d_]{2,}")  # two letters or more: one alone is a unit or a symbol

OFFICE = "198.51.100.10"  # alice behind it, over p-api
ATTACKER = "203.0.113.99"  # anonymous, banned by p-burst
BLOCKED = "192.0.2.7"  # blocked by staff
NETWORK = "100.64.0.0/24"  # in the blocklist
KEY = "key-123"  # an API key allow-listed

PAGE = "admin:django_ratelimits_offenders"
JSON = "admin:django_ratelimits_offenders_json"
DETAIL = "admin:django_ratelimits_offender"
ACTION = "admin:django_ratelimits_offender_action"
BLOCKS = "admin:django_ratelimits_blocks"


# --------------------------------------------------------------------------- the translation


class Marking(gettext_module.NullTranslations):
    """Translates every message into itself between markers (a context is dropped, as
    a catalog would: the translation is of the message).

    Each stretch of the message's own text is marked and its placeholders are left
    outside: what fills them in must be data, or translated itself (a reason, a
    label). With ``whole``, the message is marked as one, values and all: what a page
    puts beside a sentence rather than in it is then outside every mark."""

    def __init__(self) -> None:
        super().__init__()
        self.whole = False

    def _mark(self, message: str) -> str:
        marked = f"{OPEN}{message.rpartition(trans_real.CONTEXT_SEPARATOR)[2]}{CLOSE}"
        if self.whole:
            return marked
        return PLACEHOLDER.sub(lambda found: f"{CLOSE}{found[0]}{OPEN}", marked)

    def gettext(self, message: str) -> str:
        return self._mark(message)

    def ngettext(self, msgid1: str, msgid2: str, n: int) -> str:
        return self._mark(msgid1 if n == 1 else msgid2)

    def language(self) -> str:
        return "en-us"

    def to_language(self) -> str:
        return "en-us"


@pytest.fixture
def marking(monkeypatch: pytest.MonkeyPatch) -> Iterator[Marking]:
    """:class:`Marking` active, and what activate() would load (``override`` ends by
    activating the language it found: this one again, not English)."""
    marking = Marking()
    monkeypatch.setattr(trans_real, "translation", lambda language: marking)
    monkeypatch.setattr(trans_real, "_default", marking)
    active = trans_real._active
    before = getattr(active, "value", None)
    active.value = marking
    yield marking
    if before is None:
        del active.value
    else:
        active.value = before


# --------------------------------------------------------------------------- visible text


class Visible(HTMLParser):
    """The text nodes a person reads (not scripts, styles, or a textarea's value), and the
    attributes they read: tooltips, labels, placeholders, buttons, the script's texts."""

    ATTRIBUTES = frozenset({"title", "aria-label", "placeholder", "data-label"})
    HIDDEN = frozenset({"script", "style", "textarea"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.attributes: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.HIDDEN:
            self.hidden += 1
        button = tag == "input" and dict(attrs).get("type") in ("submit", "button")
        for name, value in attrs:
            read = name in self.ATTRIBUTES or name.startswith("data-text-")
            if value is not None and (read or (button and name == "value")):
                self.attributes.append(value)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN and self.hidden:
            self.hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.texts.append(data)


def unmark(text: str) -> tuple[str, int]:
    """``text`` without its marked parts (nested ones too), and how many there were."""
    count = 0
    while True:
        text, found = MARKED.subn(" ", text)
        if not found:
            return text, count
        count += found


def left_over(texts: Iterable[str], data: Iterable[str]) -> tuple[list[str], int]:
    """The words of ``texts`` outside marked parts and ``data``; the marked parts' count.

    The data are taken out longest first (``p-api`` before ``api``)."""
    shown = sorted({d for d in data if d}, key=len, reverse=True)
    known = re.compile("|".join(re.escape(d) for d in shown)) if shown else None
    words: list[str] = []
    marked = 0
    for text in texts:
        rest, count = unmark(text)
        marked += count
        if known is not None:
            rest = known.sub(" ", rest)
        words += WORD.findall(rest)
    return words, marked


def untranslated(html: str, data: Iterable[str]) -> tuple[list[str], int]:
    """What :func:`left_over` finds on a page: its text as one stream (a marked
    sentence may hold tags), each attribute on its own."""
    parser = Visible()
    parser.feed(html)
    parser.close()
    data = list(data)
    words, marked = left_over(["\n".join(parser.texts)], data)
    more, marked_attributes = left_over(parser.attributes, data)
    return words + more, marked + marked_attributes


def test_the_check_finds_a_word_left_out_and_counts_the_marked_ones() -> None:
    html = (
        f'<p title="{OPEN}Tip{CLOSE}">{OPEN}Hello <b>alice</b>{CLOSE} there'
        f"<script>var ignored;</script> {OPEN}{OPEN}a{CLOSE}: b{CLOSE} p-api \u00d73</p>"
        f'<input type="submit" value="Go"><td data-label="{OPEN}Who{CLOSE}">'
    )
    assert untranslated(html, ["p-api"]) == (["there", "Go"], 5)


# --------------------------------------------------------------------------- the site


class Site:
    """A site with traffic, records, blocks, overrides and a blocklist, and everything
    its pages show that is data, not text."""

    def __init__(self, client: Client, django_user_model: Any) -> None:
        self.client = client
        Group.objects.create(name="vip")
        api = Policy.objects.create(
            name="p-api",
            rates="3/m, 100/h",
            algorithm="sliding_log",
            key="ip_and_user",
            path="^/api/hello",
            methods="GET, POST",
            record_metadata="every",
            exempt_staff=True,
            allow_cidrs="10.0.0.0/8\n172.16.0.0/12\n192.168.0.0/16\n100.127.0.0/16",
            burst=None,
        )
        PolicyTier.objects.create(policy=api, match="group", name="vip", rates="30/m")
        PolicyTier.objects.create(
            policy=api, order=1, match="attribute", name="profile.plan", value="pro", rates="60/m"
        )
        Policy.objects.create(
            name="p-burst",
            rates="2/m",
            algorithm="token_bucket",
            burst=2,
            key="ip",
            path="^/api/other",
            ban_after=2,
            ban_within="10m",
            ban_for="15m",
            ban_max="1h",
            fail_closed=True,
        )
        Policy.objects.create(
            name="p-watch", rates="1/m", mode="shadow", key="ip", path="^/api/", cost=1
        )
        Policy.objects.create(name="p-slots", rates="5", algorithm="concurrency", lease=30)
        Policy.objects.create(
            name="p-login", rates="5/m", counts="failed_logins", key="username", enabled=False
        )
        current().refresh()
        self.alice = django_user_model.objects.create_user("alice", password="x")
        ghost = django_user_model.objects.create_user("ghost", password="x")
        self.gone = str(ghost.pk)
        expires = timezone.now() + timezone.timedelta(days=1)
        for kind, value in (("user", str(self.alice.pk)), ("user", self.gone)):
            RateOverride.objects.create(
                identity_kind=kind,
                identity_value=value,
                policy=api,
                rates="50/m",
                expires_at=expires,
                reason="spam",
            )
        BlockedNetwork.objects.create(network=NETWORK, reason="spam")

        self.hit("/api/hello", OFFICE, self.alice, times=5)
        self.hit("/api/hello", OFFICE, ghost, times=1)
        ghost.delete()
        self.hit("/api/other", ATTACKER, times=6)
        offenders = Offenders()
        offenders.block(Identity("ip", BLOCKED), 300, by="admin")
        offenders.allow(Identity("header", KEY), 3600, by="ops")
        current().refresh()

    @staticmethod
    def hit(path: str, ip: str, user: Any = None, times: int = 1) -> list[int]:
        client = Client(REMOTE_ADDR=ip)
        if user is not None:
            client.force_login(user)
        return [client.get(path).status_code for _ in range(times)]

    @property
    def data(self) -> list[str]:
        """What the pages show that the test wrote: names, values, paths, reasons."""
        users = ["admin", "alice", "ghost", self.gone, str(self.alice.pk)]
        policies = [*Policy.objects.values_list("name", flat=True), *current().names()]
        return [
            *users,
            *policies,
            "vip",
            "profile.plan",
            "pro",
            "spam",
            "ops",
            KEY,
            "/api/hello",
            "/api/other",
            "^/api/hello",
            "^/api/other",
            "^/api/",
            *HTTP_METHODS,  # the policy form lists them; FETCH is one typed wrong
            "FETCH",
            # Notations staff type and read back: an identity (kind:value), a concurrency
            # policy's rate (5/concurrent).
            "/concurrent",
            *(f"{kind}:" for kind in ("ip", "user", "header", "key", "username")),
            # The kinds one may type, listed as typed after a wrong one (device:phone).
            ", ".join(RECORDED_KINDS),
            "device",
            "phone",
            "nobody",
            "p-gone",
            "nonsense",
            "garbage",
            "Plan",  # a tier's attribute path typed wrong (profile.Plan)
            re2_says("^/api/(unclosed"),
            # Dotted paths: one typed, and the key functions the site allows.
            "os.getcwd",
            *key_functions.allowed(),
            "testserver",
        ]

    def check(self, url: str, expect: str = "", **post: Any) -> int:
        """GET (or POST) ``url``, follow redirects; fail on a word not translated, or
        if the page does not say ``expect`` (what the case is there to show).
        Returns how many marked strings the page had."""
        response = (
            self.client.post(url, post, follow=True) if post else self.client.get(url, follow=True)
        )
        assert response.status_code in (200, 400, 404), (url, response.status_code)
        html = response.content.decode()
        said = html if OPEN in expect or CLOSE in expect else html.translate(UNMARKED)
        assert expect in said, f"{url} {post} does not say {expect!r}"
        return self.words(url, html)

    def words(self, where: str, html: str) -> int:
        words, marked = untranslated(html, self.data)
        assert words == [], f"untranslated on {where}: {words}"
        assert marked > 0, f"nothing translated on {where}: the check did not reach it"
        return marked


@pytest.fixture
def site(site_redis: Any, marking: Marking, admin_client: Client, django_user_model: Any) -> Site:
    return Site(admin_client, django_user_model)


def detail(kind: str, value: str) -> str:
    return f"{reverse(DETAIL)}?{urlencode({'kind': kind, 'value': value})}"


# What the admin forms' cases post: a valid form each, that a case makes wrong.
POLICY_FORM = {
    "name": "p-api",
    "mode": "enforce",
    "algorithm": "fixed_window",
    "rates": "3/m",
    "cost": "1",
    "counts": "requests",
    "key": "ip",
    "record_metadata": "denials",
    "priority": "0",
    "ban_after": "0",
    "tiers-TOTAL_FORMS": "0",
    "tiers-INITIAL_FORMS": "0",
}
TIER_FORM = {
    "tiers-TOTAL_FORMS": "1",
    "tiers-0-order": "0",
    "tiers-0-match": "attribute",
    "tiers-0-name": "profile.plan",
    "tiers-0-value": "pro",
    "tiers-0-rates": "30/m",
}
OVERRIDE_FORM = {
    "rates": "10/h",
    "expires_at_0": "2099-01-01",
    "expires_at_1": "00:00:00",
    "reason": "spam",
}


# --------------------------------------------------------------------------- the pages


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_dashboard_pages_have_no_untranslated_text(site: Site) -> None:
    offenders = reverse(PAGE)
    marked = sum(
        site.check(url, expect)
        for url, expect in (
            (offenders, "identities denied in the"),
            # Whole sentences for the script, which fills the placeholder in.
            (offenders, f'data-text-updated="{OPEN}Updated at {{time}}{CLOSE}"'),
            (offenders, f'data-text-failed="{OPEN}Could not refresh: {{error}}{CLOSE}"'),
            (f"{offenders}?shown=shadow", "shadow-mode policies would have denied"),
            (
                f"{offenders}?order=denials&period=300&kind=ip&policy=p-api",
                "the filters on this page",
            ),
            (f"{offenders}?user={site.gone}", "No user has the id"),
            (f"{offenders}?ip=garbage&user=nobody", "Enter an IP address or a network"),
            (f"{offenders}?ip={OFFICE}&kind=user", "An IP filter shows IP addresses only."),
            (f"{offenders}?page=2", f"{OPEN}Page {CLOSE}2"),
            (detail("ip", OFFICE), f"(would have denied){CLOSE}"),
            (detail("user", str(site.alice.pk)), "This identity has its own rates"),
            (detail("user", site.gone), "no user has this id (deleted"),
            (detail("ip", ATTACKER), f"{OPEN}banned (level {CLOSE}1{OPEN})"),
            (detail("ip", BLOCKED), f"{OPEN}blocked, "),
            (detail("header", KEY), f"{OPEN}allow-listed, "),
            (detail("ip", "127.0.0.1"), "No recorded traffic in the last minute."),
            (detail("device", "phone"), "is not a kind of identity"),
            (detail("ip", "10.0.0.0/8"), "address groups of"),
            (detail("user", "nobody"), "no user has the id or username"),
            (reverse(BLOCKS), "automatic: the ban of"),
        )
    )
    assert marked > 500


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_json_the_page_polls_has_no_untranslated_text(site: Site) -> None:
    for query in ("", "?shown=shadow", "?ip=garbage&user=nobody", f"?user={site.gone}"):
        url = f"{reverse(JSON)}{query}"
        body = json.loads(site.client.get(url).content)
        for part, html in body["html"].items():
            site.words(f"{url} ({part})", html)
        errors = [e["message"] for field in body["errors"].values() for e in field]
        words, _ = left_over([*errors, body["error"] or ""], site.data)
        assert words == [], f"untranslated in {url}'s errors: {words}"


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_confirmations_and_the_messages_after_an_action_are_translated(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    action = reverse(ACTION)
    asks: list[tuple[dict[str, Any], str, str]] = [  # (fields, asked, done)
        (
            {"kind": "ip", "value": OFFICE, "action": "reset", "policy": "p-api", "forget": "on"},
            "forgotten: it leaves the offenders list",
            "(policy p-api) and forgot its offender record",
        ),
        ({"kind": "ip", "value": OFFICE, "action": "reset"}, "every policy", "(all policies)"),
        (
            {"kind": "ip", "value": "127.0.0.1", "action": "block", "seconds": "300"},
            "This is your own IP address",
            f"{OPEN}Blocked {CLOSE}ip:127.0.0.1{OPEN} for",
        ),
        (
            {"kind": "user", "value": str(site.alice.pk), "action": "allow", "seconds": "3600"},
            "lets its requests through",
            f"{OPEN}Allow-listed {CLOSE}user:{site.alice.pk}{OPEN} for",
        ),
        (
            {"kind": "header", "value": KEY, "action": "block", "seconds": "86400"},
            "No enabled policy counts",
            "no policy applies this until one does",
        ),
        (
            {"kind": "ip", "value": BLOCKED, "action": "lift", "back": "blocks"},
            "Any block or allow-listing ends now",
            f"{OPEN}Lifted the block or allow-listing of {CLOSE}ip:{BLOCKED}",
        ),
        (
            {"kind": "user", "value": site.gone, "action": "forget"},
            "This cannot be undone.",
            f"{OPEN}Forgot {CLOSE}user:{site.gone}",
        ),
        (
            {"kind": "device", "value": "phone", "action": "reset"},
            "is not a kind of identity",
            "is not a kind of identity",
        ),
        ({"kind": "ip", "value": OFFICE, "action": "block"}, "Choose how long.", ""),
    ]
    for fields, asked, done in asks:
        site.check(action, asked, **fields)  # the confirmation, or why not
        site.check(action, done, **fields, confirm="on")  # the page it goes back to
    # Gone since the form was shown: a policy (the form still offers it), the block to lift.
    import django_ratelimits.dashboard.views.actions as views

    monkeypatch.setattr(views, "policy_names", lambda: ("p-api", "p-gone"))
    gone = {"kind": "ip", "value": OFFICE, "action": "reset", "policy": "p-gone"}
    site.check(action, "no enabled policy is named", **gone, confirm="on")
    lift = {"kind": "ip", "value": BLOCKED, "action": "lift"}
    site.check(action, "nothing was lifted", **lift, confirm="on")


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_admin_pages_of_the_models_have_no_untranslated_text(site: Site) -> None:
    def admin(name: str, *args: Any) -> str:
        return reverse(f"admin:django_ratelimits_{name}", args=args)

    api = Policy.objects.get(name="p-api")
    override = RateOverride.objects.get(identity_value=site.gone)
    network = BlockedNetwork.objects.get()
    words = " ".join(f"w{n}" for n in range(40))
    for url, expect in (
        (reverse("admin:index"), "Rate limits"),
        (reverse("admin:app_list", args=["django_ratelimits"]), "blocked networks"),
        (admin("policy_changelist"), "Enable the selected policies"),
        (f"{admin('policy_changelist')}?mode__exact=shadow&enabled__exact=1", "Shadow"),
        (f"{admin('policy_changelist')}?{urlencode({'q': words})}", "Search for at most"),
        *((admin("policy_change", p.pk), "What this policy does") for p in Policy.objects.all()),
        (admin("policy_change", api.pk), "Signed-in users"),
        (admin("policy_add"), "Escalating ban"),
        (admin("rateoverride_changelist"), "(no longer exists)"),
        (f"{admin('rateoverride_changelist')}?identity_kind=user&expiry=active", "not expired"),
        (admin("rateoverride_change", override.pk), "No user has this id any more"),
        (admin("rateoverride_add"), "kind:value, e.g."),
        (admin("blockednetwork_changelist"), "Blocking now"),
        (f"{admin('blockednetwork_changelist')}?in_force=yes", "in force"),
        (admin("blockednetwork_change", network.pk), "Block my own address too"),
        (admin("blockednetwork_add"), "For the admins; never shown to the blocked client."),
    ):
        site.check(url, expect)
    # Forms with their errors.
    policy = POLICY_FORM
    for wrong, expect in (
        ({"burst": "5"}, "Only the token bucket and GCRA have a burst"),
        ({"lease": "10"}, "Only concurrency policies have a lease"),
        ({"cost": "9"}, "could never pass"),
        ({"key": "header"}, "Enter the header to count by"),
        ({"key_arg": "x"}, "Leave this empty"),
        ({"path": "^api/"}, "Every request path starts with"),
        ({"methods": "GET, FETCH"}, "Unknown HTTP method"),
        ({"allow_cidrs": "10.0.0.1/8"}, "has host bits set"),
        ({"ban_after": "3", "ban_for": "99d"}, "Required when the policy bans"),
        ({"reset_on_success": "on"}, "Only a policy that counts failed logins"),
        ({"counts": "failed_logins", "key": "user"}, "A failed-login policy counts by"),
        ({"algorithm": "sliding_log", "rates": "20000/m"}, "The sliding log keeps a member"),
        ({"algorithm": "concurrency", "rates": "0"}, "For a concurrency policy, enter"),
        ({"key": "username"}, "Only a policy that counts failed logins knows"),
        ({"key": "callable", "key_arg": "os.getcwd"}, "is not one of the key functions"),
        ({"key": "header", "key_arg": "X-Api-Key"}, "would no longer apply"),
    ):
        site.check(admin("policy_change", api.pk), expect, **{**policy, **wrong})
    override = {**OVERRIDE_FORM, "policy": str(api.pk)}
    for identity, expect in (
        ("nonsense", "is not an identity: write kind:value"),
        ("user:nobody", "no user has the id or username"),
        ("ip:10.0.0.0/8", "address groups of"),
        ("device:phone", "is not a kind of identity"),
        ("header:" + "k" * 1001, "an identity&#x27;s value has 1 to"),
        ("ip:garbage", "is not an IP address or network"),
    ):
        site.check(admin("rateoverride_add"), expect, identity=identity, **override)
    # The kinds by their labels, not as stored (ip, user, header).
    site.check(
        admin("rateoverride_add"),
        "This policy counts IP, User, never Header.",
        **{**override, "identity": f"header:{KEY}"},
    )
    site.check(
        admin("rateoverride_add"),
        "No enabled policy counts the requests of Header identities",
        **{**override, "policy": "", "identity": f"header:{KEY}"},
    )
    tier = {**TIER_FORM, "tiers-0-match": "group", "tiers-0-name": "nobody"}
    site.check(admin("policy_change", api.pk), "No group is named", **{**policy, **tier})
    network = {"reason": "", "enabled": "on"}
    for value, expect in (
        ("127.0.0.0/8", "holds your own address"),
        ("0.0.0.0/4", "covers too many addresses"),
        ("nonsense", "is not an IP address or network such as"),
        ("10.0.0.1/8", "has host bits set"),
        ("é", "Enter an IP address or network such as"),
    ):
        site.check(admin("blockednetwork_add"), expect, network=value, **network)
    site.check(
        admin("blockednetwork_add"),
        "This time has already passed",
        network="100.64.1.0/24",
        expires_at_0="2000-01-01",
        expires_at_1="00:00:00",
        **network,
    )
    # An action, and the message it leaves.
    site.check(
        admin("policy_changelist"),
        "policy changed.",
        action="switch_to_shadow",
        _selected_action=[str(api.pk)],
        index="0",
    )


def re2_says(pattern: str) -> str:
    """What RE2 says of ``pattern``: the library's English, which no catalog holds."""
    try:
        PathPattern(pattern)
    except PatternError as error:
        return str(error)
    raise AssertionError(f"RE2 runs {pattern!r}")


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_reason_after_a_form_error_s_lead_is_translated_too(site: Site) -> None:
    """The rate grammar's reason and the tier parser's are sentences of their own,
    translated where shown; what was typed is quoted as it is. RE2's reason is the
    library's English: quoted in a sentence that says it is RE2's."""
    api = Policy.objects.get(name="p-api")
    change = reverse("admin:django_ratelimits_policy_change", args=[api.pk])
    long = "10/s," + " " * 100 + "10/x"
    for wrong, expect in (
        ({"rates": "10/x"}, "(expected s, m, h or d)"),
        ({"rates": "x/m"}, "expected an integer limit, found"),
        ({"rates": "10/"}, "expected a unit (s, m, h or d), found the end of the input"),
        ({"rates": "10/m, 20/60s"}, "(each period may appear once)"),
        ({"rates": "10/s 20/m"}, "expected &#x27;,&#x27; or the end of the input after the rate"),
        ({"rates": "10/90d"}, "seconds is longer than 30 days"),
        ({"rates": "0/s"}, "limit must be between 1 and 1000000, found 0"),
        ({"rates": "1.5/s"}, "limit must be a whole number of ASCII digits"),
        ({"rates": long}, f"({len(long)} characters) at position"),
        ({"identity_budget": "5/q"}, "unknown unit"),
        ({"ban_after": "3", "ban_within": "10m", "ban_for": "0m"}, "at least 1, found 0"),
        ({"path": "^/api/(unclosed"}, f"RE2 says: “{re2_says('^/api/(unclosed')}”."),
        ({**TIER_FORM, "tiers-0-name": "profile.Plan"}, "is not a plain attribute name"),
        ({**TIER_FORM, "tiers-0-name": "a.b.c.d.e"}, "at most 4 names"),
        ({**TIER_FORM, "tiers-0-rates": "30/x"}, "unknown unit"),
    ):
        site.check(change, expect, **{**POLICY_FORM, **wrong})
    add = reverse("admin:django_ratelimits_rateoverride_add")
    override = {**OVERRIDE_FORM, "policy": str(api.pk), "identity": f"ip:{OFFICE}"}
    site.check(add, "unknown unit", **{**override, "rates": "5/x"})


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_blocks_page_says_who_set_each_and_when_in_one_sentence(
    site: Site, marking: Marking
) -> None:
    """Who set a block or allow-listing (or the policy whose ban it is) and when, as
    one sentence a language may order: with messages marked whole, the cell is all
    inside marks (the date too), not a sentence with ", <date>" after it."""
    marking.whole = True
    html = site.client.get(reverse(BLOCKS)).content.decode()
    rows = re.findall(r'<tr class="rl-block".*?</tr>', html, re.S)
    assert len(rows) == 3  # BLOCKED, KEY, ATTACKER's ban
    for row in rows:
        set_by = unescape(re.sub(r"<[^>]+>", "", re.findall(r"<td>(.*?)</td>", row, re.S)[3]))
        assert re.search(r"\d{4}", set_by), set_by  # the year of the date
        left, marked = unmark(set_by)
        assert marked and not left.strip(), f"outside the sentence: {left.strip()!r}"


@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_refusal_pages_have_no_untranslated_text(site: Site) -> None:
    html = {"HTTP_ACCEPT": "text/html"}
    client = Client(REMOTE_ADDR="198.51.100.77", **html)
    assert [client.get("/api/other").status_code for _ in range(2)] == [200, 200]
    refused = client.get("/api/other")
    assert refused.status_code == 429 and "You can try again in" in refused.content.decode()
    site.words("the 429 page", refused.content.decode())
    back = client.get("/api/other", HTTP_REFERER="http://testserver/somewhere").content.decode()
    assert "Back to the page you came from" in back
    site.words("the 429 page with a way back", back)
    blocked = Client(REMOTE_ADDR="100.64.0.9", **html).get("/api/hello")
    assert blocked.status_code == 403 and "not accepted" in blocked.content.decode()
    site.words("the blocklist's 403 page", blocked.content.decode())
    redis = "redis://127.0.0.1:1/0"  # nothing answers: p-burst fails closed
    with override_settings(
        DJANGO_RATELIMITS={
            **settings.DJANGO_RATELIMITS,
            "REDIS": redis,
            "SOCKET_CONNECT_TIMEOUT": 0.2,
        }
    ):
        closed = Client(REMOTE_ADDR="198.51.100.78", **html).get("/api/other")
    assert closed.status_code == 503 and "Try again later." in closed.content.decode()
    site.words("the fail-closed 503 page", closed.content.decode())


# --------------------------------------------------------------------------- the live status


def status_after_a_refresh(page: Any) -> str:
    """Pause the live updates (which says so), then resume them: the page asks for the
    JSON at once and says how that went."""
    open_offenders(page)
    page.uncheck("#offenders-live-toggle")
    assert page.inner_text("#offenders-status") == "Live updates paused."
    page.check("#offenders-live-toggle")
    page.wait_for_function(
        "!document.getElementById('offenders-status').textContent.startsWith('Live')"
    )
    return str(page.inner_text("#offenders-status"))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_live_status_puts_the_time_in_its_translated_sentence(
    site_redis: Any, page: Any
) -> None:
    User.objects.create_superuser("boss", password="pw")
    status = status_after_a_refresh(page)
    assert re.fullmatch(r"Updated at \d{1,2}:\d{2}:\d{2}\s?([AP]M)?", status), status


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("redis_client", ["standalone"], indirect=True)
def test_the_live_status_puts_the_error_in_its_translated_sentence(
    redis_down: None, page: Any
) -> None:
    User.objects.create_superuser("boss", password="pw")
    status = status_after_a_refresh(page)
    assert status.startswith("Could not refresh: Could not read the offenders from Redis: ")
    assert "{error}" not in status
