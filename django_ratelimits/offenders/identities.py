"""The identities staff may name: each kind checked one way, for the dashboard and the command.

:func:`resolve` turns what staff typed (``kind`` and ``value``) into the
:class:`~django_ratelimits.engine.Identity` the limiter counts, or raises
:class:`NoSuchIdentity` with the reason no request could ever be counted so:

- ``ip``: an address, or a network no wider than one address group, as the group the limiter counts
  (``IPV4_PREFIX``, ``IPV6_PREFIX``: ``2001:db8::7`` is ``2001:db8::/64`` by
  default), or ``unknown`` (requests with no usable address); with ``HASH_IPS``
  the value is the group's keyed hash (``h:`` and 32 hex digits), which staff
  may also type as the dashboard shows it;
- ``user``: a user that exists, by id or by username (an id first); the value
  is its id, as the limiter counts it. With ``former_users`` (what only acts on what
  Redis holds: show, reset, lift, forget, ending an override), also an id no user
  has any more (a value the user model's primary key takes): the limiter counted the
  deleted user under it, and its data must stay erasable. A username is never
  taken for an id: one that no user has is refused either way;
- ``header`` and ``key``: any value of 1 to :data:`VALUE_MAX` characters with
  something other than spaces (a header or a key function's answer); ``get`` and
  ``post`` alike (a query or form field, the compat layer's ``get:``/``post:`` keys);
- ``username``: a username tried at login (failed-login policies), normalised as
  they count it (``Admin`` is ``admin``); ``ip_username``: an address and a
  username tried, separated by a space (``203.0.113.7 admin``);
- any other kind is refused: no part of the limiter counts one.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable
from typing import Any, Final

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils.translation import gettext, ngettext

from django_ratelimits.conf import get_settings, ip_network
from django_ratelimits.engine import Identity
from django_ratelimits.engine.hits import read_as
from django_ratelimits.identity import (
    HASHED,
    UNKNOWN,
    counted_ip,
    group,
    normalize_username,
    parse_address,
)
from django_ratelimits.offenders.users import Users, users
from django_ratelimits.policies.spec import IDENTITY_KINDS

VALUE_MAX = 1000
RECORDED_KINDS: Final = (*IDENTITY_KINDS, "get", "post")
"""Every kind of identity whose denials the package records, so every kind the offender
listing can be filtered by, and staff may block, allow-list, reset or forget: the kinds
policies count, and those of the compat layer's ``get:`` and ``post:`` keys
(:mod:`django_ratelimits.compat`), which no policy counts."""
_HASH = re.compile(re.escape(HASHED) + "[0-9a-f]{32}")


class NoSuchIdentity(ValueError):
    """What staff named is no identity the limiter could count; the message says why, in
    the active language (the dashboard and admin show it; the command prints it)."""


def parse(text: str, *, former_users: bool = False) -> Identity:
    """``kind:value`` as staff type it (``ip:203.0.113.7``, ``user:alice``), resolved."""
    kind, colon, value = text.partition(":")
    if not colon or not value:
        raise NoSuchIdentity(
            # Translators: %(text)s is what staff typed, quoted.
            gettext("%(text)s is not an identity: write kind:value, e.g. ip:203.0.113.7")
            % {"text": repr(text)}
        )
    return resolve(kind, value, former_users=former_users)


def resolve(kind: str, value: str, *, former_users: bool = False) -> Identity:
    """The identity the limiter counts for ``kind`` (one of :data:`RECORDED_KINDS`) and
    ``value``; :class:`NoSuchIdentity` if none. With ``former_users``, ``user:`` and the
    id of a deleted user is the identity it was counted as (see the module). Costs one
    or two database queries for a user, nothing else."""
    if kind not in RECORDED_KINDS:
        raise NoSuchIdentity(
            # Translators: %(kind)s is the kind staff typed, quoted; %(kinds)s lists the
            # kinds as typed (ip, user, header...), not words to translate.
            gettext("%(kind)s is not a kind of identity (one of %(kinds)s)")
            % {"kind": repr(kind), "kinds": ", ".join(RECORDED_KINDS)}
        )
    if not value.strip() or len(value) > VALUE_MAX:
        raise NoSuchIdentity(
            ngettext(
                "an identity's value has 1 to %(max)d character, not only spaces",
                "an identity's value has 1 to %(max)d characters, not only spaces",
                VALUE_MAX,
            )
            % {"max": VALUE_MAX}
        )
    if kind == "ip":
        return Identity("ip", ip_value(value))
    if kind == "user":
        return Identity("user", user_pk(value, former=former_users))
    if kind == "username":
        return Identity(kind, _username(value))
    if kind == "ip_username":
        address, _, name = value.strip().partition(" ")
        return Identity(kind, f"{ip_value(address)} {_username(name)}")
    return Identity(kind, value)


def _username(value: str) -> str:
    name = normalize_username(value)
    if name is None:
        raise NoSuchIdentity(gettext("a username tried has something other than spaces"))
    return name


def ip_value(value: str) -> str:
    """The value the limiter counts the address or network ``value`` under: its group
    (:func:`address_group`), or with ``HASH_IPS`` the group's hash, which may also be
    given as it is."""
    config = get_settings()
    if config.hash_ips and _HASH.fullmatch(value):
        return value
    return counted_ip(address_group(value), config)


def override_who(row: Any) -> str:
    """How hit entries name the identity of an override ``row`` (``identity_kind``,
    ``identity_value``), which :func:`~django_ratelimits.offenders.users.users` keeps its
    user's name under: its label, but for a user whose label is not (``user:-``, which
    entries keep for anonymous clients, is ``user:%2D`` there)."""
    return read_as(Identity(row.identity_kind, row.identity_value))


def counted_overrides(rows: Iterable[Any]) -> tuple[Users, dict[Any, bool]]:
    """Of identity override ``rows``: what one query says of their users, and by primary
    key whether the limiter counts each row's identity now (:func:`counted_now`, a user
    deleted since not): what admin's list and ``ratelimits overrides`` call in force,
    once not expired."""
    rows = list(rows)
    known = users(override_who(row) for row in rows if row.identity_kind == "user")
    counted = {
        row.pk: counted_now(Identity(row.identity_kind, row.identity_value), known.gone)
        for row in rows
    }
    return known, counted


def counted_now(identity: Identity, gone: Container[str] = frozenset()) -> bool:
    """Whether the limiter counts requests as ``identity`` under the settings now: false
    for an IP (or the IP of an ``ip_username``) stored as counted before ``HASH_IPS``,
    ``IPV4_PREFIX`` or ``IPV6_PREFIX`` changed (``203.0.113.5`` once the limiter counts
    ``203.0.113.0/24``, or ``h:`` and a hash once it counts addresses). A hash made under
    another secret has the counted form and cannot be told from a current one.

    False too for a ``user:<pk>`` among ``gone``, the users
    :func:`~django_ratelimits.offenders.users.users` found no user has any more (a user
    deleted since: nothing authenticates as it). Without ``gone`` a user is counted."""
    if identity.kind == "user":
        return read_as(identity) not in gone
    if identity.kind not in ("ip", "ip_username"):
        return True
    address = identity.value.partition(" ")[0]
    try:
        return ip_value(address) == address
    except NoSuchIdentity:
        return False


def address_group(value: str) -> str:
    """The address group the limiter counts ``value`` (an address or network) in. A
    network wider than one group is refused: the limiter counts each of its groups
    apart, and naming its first would act on that one alone."""
    if value == UNKNOWN:
        return value
    config = get_settings()
    address = parse_address(value)
    if address is None:
        try:
            network = ip_network(value.strip(), strict=False)
        except ValueError:
            raise NoSuchIdentity(
                # Translators: %(value)s is what staff typed, quoted.
                gettext("%(value)s is not an IP address or network") % {"value": repr(value)}
            ) from None
        prefix = config.ipv4_prefix if network.version == 4 else config.ipv6_prefix
        if network.prefixlen < prefix:
            groups = 2 ** (prefix - network.prefixlen)
            raise NoSuchIdentity(
                # Translators: "Blocked networks" is the admin page of that name.
                ngettext(
                    "%(value)s holds %(count)s address group of /%(prefix)s, each counted "
                    "apart: name one address, or block the network in Blocked networks",
                    "%(value)s holds %(count)s address groups of /%(prefix)s, each counted "
                    "apart: name one address, or block the network in Blocked networks",
                    groups,
                )
                % {
                    "value": repr(value),
                    "count": f"{groups:,}",
                    "prefix": prefix,
                }
            )
        address = network.network_address
    return group(address, config.ipv4_prefix, config.ipv6_prefix)


def user_pk(value: str, *, former: bool = False) -> str:
    """The id of the user whose id, else whose username, is ``value``; with ``former``,
    ``value`` read as the id of a user deleted since, as the limiter counted it
    (``str(user.pk)``), whenever the primary key takes it (for an integer key, a
    number), before any username: of a user deleted since, the id is all that names it.

    A username that no user has is refused even with ``former``: it was never counted
    (the limiter counts users by id). Where the primary key is text, any value is one:
    there a live user's username names that user first (``user:alice``, whose id is
    ``auth0|123``), a deleted user whose id is another's username cannot be named, and a
    name that never existed resolves to a ``user:`` that nothing counted.
    """
    return find_user(value, former=former)[0]


def find_user(value: str, *, former: bool = False) -> tuple[str, bool]:
    """:func:`user_pk`'s id, and whether no user has it any more (only with ``former``).

    With ``former``, a value the primary key can hold is an id, whether or not a user
    has it: a deleted user's id is never taken for the username of another."""
    model = get_user_model()
    manager: Any = model._default_manager
    try:
        pk = model._meta.pk.to_python(value)
    except ValidationError:
        pk = None
    found = None if pk is None else manager.filter(pk=pk).values_list("pk", flat=True).first()
    deleted = former and pk is not None and _could_be(model._meta.pk, pk)
    # An id no user has is the deleted user's, never another user's username: else
    # forgetting user 42, deleted, would erase (and lift) the live user named "42". Not
    # where the key is text: there every username is an id a user may have had, and
    # taking it for one would say a live user named so is gone and act on nothing.
    if found is None and deleted and not isinstance(pk, str):
        return str(pk), True
    if found is None:
        field = model.USERNAME_FIELD
        found = manager.filter(**{field: value}).values_list("pk", flat=True).first()
    if found is None and deleted:
        return str(pk), True
    if found is None:
        if former:
            message = gettext(
                "no user has the id or username %(value)s (a deleted user is named by its id)"
            )
        else:
            message = gettext(
                "no user has the id or username %(value)s (a deleted user's data can still be "
                "shown, reset, lifted or forgotten by its id)"
            )
        raise NoSuchIdentity(message % {"value": repr(value)})
    return str(found), False


def _could_be(field: Any, pk: object) -> bool:
    """Whether ``pk`` is a value the primary key ``field`` can hold (an integer key's
    range in this database, a key's own validators), so a user may have had it."""
    try:
        field.run_validators(pk)
    except ValidationError:
        return False
    return True
