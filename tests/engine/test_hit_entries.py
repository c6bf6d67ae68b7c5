"""The user behind a hit entry: written so that it reads back as that user, and no other.

Entries are ``|``-separated (``engine/hits.py``); a user's id is any text under a text
primary key (``sub|alice``, an identity provider's subject). What the script stores is
checked against what was sent in ``test_engine_offenders.py``; here, what the limiter
sends (:func:`user_behind`, cut and made printable as the engine cuts a head,
:func:`full_entry`) against what the readers take from it (:func:`parse`,
:func:`named_identity`, :func:`behind` for erasure).
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from django_ratelimits.engine import Identity
from django_ratelimits.engine.hits import (
    ANONYMOUS,
    behind,
    entry_head,
    full_entry,
    named_ident,
    named_identity,
    parse,
    user_behind,
    user_read,
)
from django_ratelimits.engine.keys import ident, key_part, label

# Ids an entry holds as they are, and the characters that have to be written otherwise.
HARD = st.text(alphabet=st.sampled_from("ab|/%7C\u2026 ~\x00\n\u00e9\ufffd"), max_size=80)
# Ids that end as an entry ends a key it holds cut: "…", a space and a digest, of any
# id (a user picking their own may copy another user's digest off the dashboard).
LOOKING_CUT = st.builds(
    lambda shown, of: f"{shown}\u2026 {key_part(of)}",
    st.one_of(HARD, st.text(max_size=160)),
    st.one_of(HARD, st.text(min_size=65, max_size=200)),
)
IDS = st.one_of(HARD, st.text(max_size=300), LOOKING_CUT)
# "-" is left out: anonymous clients are written "user:-" (the user "-" is escaped).
PLAIN = st.text(st.characters(blacklist_characters="|%\u2026"), max_size=150).filter(
    lambda pk: pk.isprintable() and pk != "-"
)


def who_read(pk: str) -> str:
    """The ``who`` the dashboard reads of a request by user ``pk``."""
    entry = full_entry(entry_head(user_behind(pk), "GET", "/x|y"), 1, "A", {"p": "A"})
    hit = parse(entry.encode())
    assert hit is not None and hit.what == "GET /x|y"
    return hit.who


def test_ids_an_entry_holds_as_they_are_are_written_so() -> None:
    for pk in ("42", "sub:alice", "alice@example.com", "9b2e7c1e-0f3a-4c1e-8d39-1f6c1b2a3c4d"):
        assert user_behind(pk) == f"user:{pk}" == who_read(pk)
    assert user_behind(None) == ANONYMOUS


@given(IDS)
@example("sub|alice")
@example("sub%7Calice")
@example("|" * 64)
@example("a\u2026 ~" + "A" * 20)
@example("-")
def test_a_user_read_from_an_entry_is_the_user_who_made_the_request(pk: str) -> None:
    """Read back, a user is named as the dashboard labels them (``user:sub|alice``), or,
    for an id no entry holds whole (too long), by a cut form whose digest is the user's
    keys' and which names no user by id."""
    who = who_read(pk)
    assert who == user_read(pk)
    identity, digest = named_identity(who)
    if digest is None:  # as labelled, but the one id whose label reads as anonymous
        assert who == ("user:%2D" if pk == "-" else label(Identity("user", pk)))
        assert identity == Identity("user", pk)
    else:  # named by a digest: always the user's own, never one their id merely ends with
        assert digest == ident(Identity("user", pk))
    # The user's keys, whichever way the entry names them: what forget and the chart use.
    assert named_ident(who) == ident(Identity("user", pk))
    # Erasure finds the entries that name the user by what the limiter writes.
    assert behind(Identity("user", pk)) == user_behind(pk)


@given(PLAIN)
def test_an_id_an_entry_holds_as_it_is_is_written_as_before(pk: str) -> None:
    """Entries already in Redis stay readable: an id of at most 150 printable characters
    without ``|``, ``%`` or ``…`` is written, and read, as it is."""
    assert user_behind(pk) == f"user:{pk}" == who_read(pk)


@given(IDS, IDS)
@example("sub|bob", "sub/bob")
@example("sub%7Cbob", "sub|bob")
@example("sub%257Cbob", "sub%7Cbob")
@example("-", "%2D")  # the user "-" is written, and read, user:%2D
# An id that looks cut, against the id its cut form names: the one written cut (too long
# once escaped) and one shown with a digest because it holds an unprintable character.
@example("/" * 64 + "\u2026 " + key_part("|" * 64), "|" * 64)
@example("x\ufffd\u2026 " + key_part("x\x00"), "x\x00")
def test_two_users_are_never_read_as_one(pk: str, other: str) -> None:
    """Before, ``sub|bob`` was written ``user:sub/bob``: the id of another user; and an
    id ending as a cut one does read as the cut form of the id whose digest it copied."""
    if pk != other:
        assert user_behind(pk) != user_behind(other)
        assert who_read(pk) != who_read(other)


def test_a_user_whose_id_is_a_dash_is_not_anonymous() -> None:
    """A user choosing the id ``-`` (a username Django accepts, under a model keyed by
    username) was written ``user:-``, as anonymous clients are: shown so, never named,
    and left out when their IP was forgotten. They are written, and read, ``user:%2D``,
    which names them."""
    assert user_behind("-") == who_read("-") == "user:%2D" != ANONYMOUS
    assert named_identity(who_read("-")) == (Identity("user", "-"), None)
    assert user_behind(None) == ANONYMOUS == parse(b"user:-|GET /|1|A|api=A").who  # type: ignore[union-attr]
