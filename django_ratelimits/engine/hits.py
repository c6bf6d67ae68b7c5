"""The hit entry: one request in an identity's metadata list.

This module is the Python side of the format, the one place that writes and
parses it. An entry reads ``<who>|<what>|<ms>|<outcome>|<policies>``:

- ``who`` is the other identity behind the request: ``user:<pk>`` (``user:-``
  when anonymous, so the user whose id is ``-`` is written and read ``user:%2D``) in
  an IP's list, or ``username:<name>`` for a login's username
  tried (failed-login policies; a name an entry cannot hold as it is is shown cut,
  with its key's digest: :func:`username_behind`), ``ip:<address>`` in anyone else's.
  A text primary key may hold ``|``: :func:`user_behind` escapes it (``%7C``, and
  ``%`` itself, ``…`` and anything unprintable), or writes a key too long for an
  entry cut with its digest, and :func:`parse` reads the user back as the dashboard
  labels them (``user:sub|alice``): two users are never written alike;
- ``what`` is ``<method> <path>`` and may itself hold ``|``;
- ``ms`` is the check's time in milliseconds;
- ``outcome`` is ``D`` denied (by an enforced policy or a block), ``S`` only a
  shadow-mode policy would have denied it, ``A`` allowed;
- ``policies`` names each policy that counted the request, with its own
  outcome: ``api=A,orders-watch=S`` (``!blocked=D`` for a block).

With ``HASH_IPS`` (``docs/privacy.md``) an IP is counted under a hash
(``ip:h:<hex>``) and the entry starts with ``@<address>|``: the client address
(its group) the hash stands for, kept in these short-lived entries only, so that
the dashboard can show it while a recent hit holds it. Without hashing no entry
starts with ``@`` (``who`` starts with a kind).

One request is one entry, however many policies counted it. The limiter writes
the head, ``<who>|<what>`` (:func:`entry_head`), and passes it with the
identity's checks; the engine cuts it to 300 printable characters; the check
script (``lua/check.lua``, ``note_hit`` and ``push_hits``) appends the rest and
pushes the entry when the policies' recording asks for it. The offender reader
parses entries with :func:`parse`. ``tests/engine/test_engine_offenders.py``
checks that what the script stores parses back to what was sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from django_ratelimits.engine.keys import ident, key_part, label, printable
from django_ratelimits.engine.limits import Identity

ANONYMOUS = "user:-"
# The user whose id is "-" (a username a model keyed by username may allow), as entries
# write and read them: escaped, as "user:-" names anonymous clients.
DASH_USER = "user:%2D"


DENIED, SHADOW, ALLOWED = "D", "S", "A"
_OUTCOMES = (DENIED, SHADOW, ALLOWED)
_NAME_SEPARATORS = re.compile(r"[|,=]")  # as the script replaces them in policy names
# How much of a username tried an entry shows, the mark of a name shown cut, and the
# digest of its key after that mark (keys.key_part: "~" and 20 characters).
_USERNAME_SHOWN = 150
CUT = "\u2026"  # the mark of a value shown cut, before its digest
_DIGESTED = re.compile(CUT + r" (~[A-Za-z0-9_-]{20})\Z")
_CUT_KINDS = ("username", "user")  # the kinds an entry may name by a digest
# What a user's key cannot hold as it is in an entry: the separator, the escape's own
# mark and the mark of a value cut (anything unprintable too).
_ESCAPED = re.compile("[%|" + CUT + "]")
_USER = "user:"


@dataclass(frozen=True)
class Hit:
    """One entry of a metadata list: who (the other identity), what, when, outcome,
    and the policies that counted it, each with its own outcome."""

    who: str  # "user:42" behind an IP, "ip:203.0.113.7" behind anything else
    what: str  # "POST /login"
    at_ms: int
    outcome: str  # DENIED, SHADOW or ALLOWED
    policies: tuple[tuple[str, str], ...] = ()  # (("api", "A"), ("orders-watch", "S"))
    address: str = ""  # with HASH_IPS, the client address (group) behind the request

    @property
    def allowed(self) -> bool:
        return self.outcome == ALLOWED

    @property
    def denied(self) -> bool:
        """Refused: an enforced policy (or a block) denied it."""
        return self.outcome == DENIED

    @property
    def shadow(self) -> bool:
        """Let through, but a shadow-mode policy would have denied it."""
        return self.outcome == SHADOW


def user_behind(pk: object | None) -> str:
    """``user:<pk>`` for a signed-in user's primary key, :data:`ANONYMOUS` for ``None``.

    A text key an entry cannot hold as it is (with ``|``, ``%``, ``…`` or anything
    unprintable) is written with those characters escaped (``%`` and the hex of their
    UTF-8 bytes: ``user:sub%7Calice``), which :func:`parse` reads back; one of over 150
    characters so written is cut to 150, with ``…``, a space and its key's digest, as
    :func:`username_behind` writes a name. The key ``-`` is written :data:`DASH_USER`,
    never as anonymous. Two keys are never written alike, so the dashboard never names
    one user for another's requests."""
    if pk is None:
        return ANONYMOUS
    value = str(pk)
    if value == "-":
        return DASH_USER
    if len(value) <= _USERNAME_SHOWN and value.isprintable() and not _ESCAPED.search(value):
        return _USER + value  # the usual case: an integer, a UUID, a plain text key
    escaped = "".join(
        ch
        if ch.isprintable() and not _ESCAPED.match(ch)
        else "".join(f"%{byte:02X}" for byte in ch.encode("utf-8", "surrogatepass"))
        for ch in value
    )
    return _USER + escaped if len(escaped) <= _USERNAME_SHOWN else _cut("user", value)


def username_behind(name: str) -> str:
    """``username:<name>`` for the username a login tried (in its IP's list). A name
    that an entry cannot hold as it is (over 150 characters, or with ``|``, ``…`` or
    anything unprintable) is written cut to 150 printable characters, ``…``, a space
    and its key's digest (``username:xxxx… ~Ab3…``, as :func:`~.keys.label` shows
    such a value): an entry stays short whatever was typed, and still names one
    identity, whose keys erasure finds (:func:`named_identity`) and whose entries it
    drops (:func:`behind`), no other's."""
    if name == printable(name, _USERNAME_SHOWN) and "|" not in name and CUT not in name:
        return f"username:{name}"
    return _cut("username", name)


def _cut(kind: str, value: str) -> str:
    """``value`` cut to 150 printable characters without ``|``, ``…``, a space and the
    digest of its key: an entry names it whole by the digest (:func:`named_identity`)."""
    shown = printable(value, _USERNAME_SHOWN).replace("|", "/")
    return f"{kind}:{shown}{CUT} {key_part(value)}"


def named_identity(who: str) -> tuple[Identity, str | None]:
    """The identity a hit entry's ``who`` names, and the ident of its keys when the
    entry holds a username or a user's key cut (:func:`username_behind`,
    :func:`user_behind`: the digest at its end) rather than the value itself (``None``:
    the keys follow from the identity). A user cut names no user by id: the dashboard
    neither names nor links it (:func:`~django_ratelimits.offenders.users.users`)."""
    if who == DASH_USER:
        return Identity("user", "-"), None
    kind, _, value = who.partition(":")
    digested = _DIGESTED.search(value) if kind in _CUT_KINDS else None
    return Identity(kind, value), None if digested is None else f"{kind}:{digested[1]}"


def named_ident(who: str) -> str:
    """The ident of the keys of the identity ``who`` names (:func:`named_identity`): the
    one its own metadata list and offender record are kept under, whether an entry names
    it whole or by a digest."""
    identity, digest = named_identity(who)
    return ident(identity) if digest is None else digest


def user_read(pk: object) -> str:
    """The ``who`` :func:`parse` reads from the entries of user ``pk``'s requests."""
    return _user_read(user_behind(pk))


def read_as(identity: Identity) -> str:
    """How hit entries name ``identity``, which the dashboard's names are kept under: a
    user by :func:`user_read` (never by its label, which may end as a cut id does while
    naming a user whole), anyone else by its label."""
    return user_read(identity.value) if identity.kind == "user" else label(identity)


def ip_behind(address: str) -> str:
    """``ip:<address>`` for the client address behind a request."""
    return _named("ip", address)


def behind(identity: Identity) -> str:
    """``identity`` as a hit entry names it behind another one (``user:42``, ``ip:...``,
    a username as :func:`username_behind` writes it): what erasure looks for."""
    if identity.kind == "username":
        return username_behind(identity.value)
    if identity.kind == "user":
        return user_behind(identity.value)
    return _named(identity.kind, identity.value)


def _named(kind: str, value: str) -> str:
    return f"{kind}:{value.replace('|', '/')}"


def entry_head(who: str, method: str | None, path: str, address: str = "") -> str:
    """``<who>|<method> <path>``: what the limiter hands the engine for one request,
    after ``@<address>|`` when an ``address`` is kept beside its hash."""
    head = f"{who}|{method} {path}"
    return f"@{address.replace('|', '/')}|{head}" if address else head


def full_entry(head: str, at_ms: int, outcome: str, policies: dict[str, str]) -> str:
    """A whole entry, as the check script writes it: for a request refused without it
    (:mod:`django_ratelimits.deny_cache`); ``policies`` maps each name to its outcome."""
    named = ",".join(f"{_NAME_SEPARATORS.sub('_', n)}={s}" for n, s in policies.items())
    return f"{printable(head, 300)}|{at_ms}|{outcome}|{named}"


def parse(entry: bytes) -> Hit | None:
    """The hit ``entry`` records, or ``None`` if it is not a whole entry."""
    text = entry.decode("utf-8", "replace")
    address = ""
    if text.startswith("@"):
        address, _, text = text[1:].partition("|")
    who, _, rest = text.partition("|")
    rest, _, named = rest.rpartition("|")
    rest, _, outcome = rest.rpartition("|")
    what, _, at = rest.rpartition("|")
    if not at.isdigit() or outcome not in _OUTCOMES:
        return None
    policies = tuple(
        (name, status)
        for name, _, status in (part.rpartition("=") for part in named.split(","))
        if name and status in _OUTCOMES
    )
    return Hit(_user_read(who), what, int(at), outcome, policies, address)


def _user_read(who: str) -> str:
    """``who`` as the dashboard labels the user an escaped key names (``user:sub|alice``
    for ``user:sub%7Calice``, :func:`user_behind`); anyone else's as written.

    An entry writes a key cut with a literal ``…`` (:func:`_cut`), and escapes the ``…``
    of any key it holds whole, so what it wrote is never in doubt; read back, a key that
    itself ends as a cut one does (``x… ~`` and 20 characters, which a user may choose)
    would be taken for one, named by a digest that is not its own (maybe another
    user's). Such a key reads with its own digest after it, as :func:`~.keys.label`
    shows a key it cannot show whole: whatever ``who`` ends with a digest names, by
    that digest, the user it was written for, and no two users read alike. The user
    whose id is ``-`` reads as written (:data:`DASH_USER`): ``user:-`` is anonymous; so
    the user whose id is ``%2D`` reads with its digest after it, as a key ending as a
    cut one does."""
    if not who.startswith(_USER) or "%" not in who or CUT in who or who == DASH_USER:
        return who
    pk = unquote(who[len(_USER) :], errors="surrogatepass")
    read = label(Identity("user", pk))
    if read == _USER + pk and (_DIGESTED.search(pk) or read == DASH_USER):
        return f"{read}{CUT} {key_part(pk)}"  # the user "%2D" is not the user "-"
    return read
