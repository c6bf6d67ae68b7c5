"""Path matching: patterns compiled for RE2, and the index that picks which to search.

A policy's path pattern is written by whoever may edit policies in admin, and
searched in every request path, which any client chooses. Python's ``re``
backtracks: ``^/(\\w+-?)*$`` costs it seconds on a 26-character path and years
on a 42-character one, holding a worker all along. RE2 (the ``google-re2``
package) never backtracks, so a search costs time linear in the path whatever
the pattern; it refuses what it cannot run that way (backreferences,
lookarounds, ``(?#...)`` comments), and :class:`PathPattern` says why.

:func:`literal_prefix` gives the index of path policies (:class:`PathIndex`)
the text every match starts with. It reads only the plain part of a pattern and
gives up (returns a shorter prefix, or "") on anything else, so that a path the
pattern matches is never skipped by the index.
"""

from __future__ import annotations

from typing import Final, Generic, Protocol, TypeVar

import re2

__all__ = [
    "CACHE_PATH_MAX",
    "PathIndex",
    "PathPattern",
    "PathRule",
    "PatternError",
    "literal_prefix",
]

CACHE_PATH_MAX: Final = 256
"""Per-path answers (the policies a path matches, what the resolver says of it) are
cached for paths up to this length. Longer paths are rare and often hostile: each
is answered afresh rather than evicting an answer a real path still needs."""

_SPECIAL: Final = frozenset(".^$*+?{}[]\\|()")
_ATOM_ESCAPES: Final = frozenset("dDwWsS")
_UNANCHORED: Final = re2._re2.RE2.Anchor.UNANCHORED
_NO_MATCH: Final = (-1, -1)


class PatternError(ValueError):
    """A path pattern RE2 cannot run; the message is RE2's reason."""


class PathPattern:
    """A path pattern compiled by RE2: :meth:`search` is linear in the path.

    A path ending in ``\\n`` is searched as it is and without it: in Python's
    ``re`` (and so in Django's ``re_path``) ``$`` also matches before a final
    newline, and ``/login/%0A`` must not escape ``^/login/$``. Erring that way,
    ``^/login/\\z`` limits it too. And ``.`` matches a newline: a path is one line
    to the URL resolver, whose ``<str:...>`` takes a newline (``/api/x%0Ay/export``
    reaches ``api/<str:name>/export``), so it must not escape ``^/api/.*/export$``.
    """

    __slots__ = ("_regexp", "pattern")

    def __init__(self, pattern: str) -> None:
        options = re2.Options()
        options.log_errors = False  # the error is raised, not printed to stderr
        options.never_capture = True  # groups are never read: the fastest automaton
        options.dot_nl = True  # "." matches "\n", as a path segment may hold one
        try:
            encoded = pattern.encode()
        except UnicodeEncodeError:
            raise PatternError("the pattern is not valid Unicode") from None
        # The engine under re2's re-like module: without that module's match objects a
        # search costs about a quarter as much.
        self._regexp = re2._re2.RE2(encoded, options)
        if not self._regexp.ok():
            raise PatternError(self._regexp.error().decode(errors="replace"))
        self.pattern = pattern

    def search(self, path: str) -> bool:
        """Whether the pattern matches anywhere in ``path``."""
        data = path.encode("utf-8", "surrogatepass")  # no hostile path can fail to encode
        if self._found(data):
            return True
        return data.endswith(b"\n") and self._found(data[:-1])

    def _found(self, data: bytes) -> bool:
        span: tuple[int, int] = self._regexp.Match(_UNANCHORED, data, 0, len(data))[0]
        return span != _NO_MATCH

    def __repr__(self) -> str:
        return f"PathPattern({self.pattern!r})"


def literal_prefix(pattern: str) -> str:
    """Text that starts every path ``pattern`` matches, or "".

    Only a pattern anchored at the start (``^`` or ``\\A``) with no top-level
    ``|`` has one: the plain characters (and escaped punctuation) that follow
    the anchor, each kept only if what comes next shows it is required once.
    Anything else ends it: a quantifier, a class, a group, ``\\Q``... A shorter
    prefix only costs a search; a longer one would skip paths the pattern
    matches (``^/ab(?i)*`` matches ``/a``: the ``*`` repeats the ``b``).

    >>> literal_prefix(r"^/api/v1/"), literal_prefix(r"^/a\\.b/?$"), literal_prefix("/api/")
    ('/api/v1/', '/a.b', '')
    """
    if pattern.startswith("^"):
        pos = 1
    elif pattern.startswith("\\A"):
        pos = 2
    else:
        return ""
    if not _no_top_level_bar(pattern):
        return ""
    prefix: list[str] = []
    while (literal := _literal_at(pattern, pos)) is not None:
        char, pos = literal
        if pattern[pos : pos + 1] == "+":
            # Once at least, then the prefix ends; unless what follows repeats the
            # whole (``^/a+(?i)*`` matches ``/``: the ``*`` repeats ``a+``).
            if _required_before(pattern, pos + 1):
                prefix.append(char)
            break
        if not _required_before(pattern, pos):
            break
        prefix.append(char)
    return "".join(prefix)


def _required_before(pattern: str, pos: int) -> bool:
    """Whether what starts at ``pos`` shows that the character before it is required:
    the end, or an atom (another literal, a class, ``.``, ``$``, ``\\d``..., a
    group that matches something), so that a quantifier there is not the character's.
    """
    following = pattern[pos : pos + 1]
    if following in ("", "[", ".", "$") or _literal_at(pattern, pos) is not None:
        return True
    after = pattern[pos + 1 : pos + 3]
    if following == "(":
        # "(?i)", "(?U)"... match nothing: a quantifier after them repeats the character.
        return not after.startswith("?") or after == "?:"
    return following == "\\" and after[:1] in _ATOM_ESCAPES


def _literal_at(pattern: str, pos: int) -> tuple[str, int] | None:
    """The literal character at ``pos`` and the position after it, or None."""
    char = pattern[pos : pos + 1]
    if not char:
        return None
    if char != "\\":
        return None if char in _SPECIAL else (char, pos + 1)
    escaped = pattern[pos + 1 : pos + 2]
    if escaped and escaped.isascii() and not escaped.isalnum() and escaped.isprintable():
        return escaped, pos + 2  # \. \/ \- \  ...: RE2 reads ASCII punctuation as itself
    return None


def _no_top_level_bar(pattern: str) -> bool:
    """Whether ``pattern`` surely has no ``|`` outside groups and classes.

    False also when unsure: ``\\Q...\\E`` quotes brackets and bars, and a
    ``[`` inside a class (``[[:alpha:]]``) may hide the class's end.
    """
    depth, pos, in_class = 0, 0, False
    while pos < len(pattern):
        char = pattern[pos]
        if char == "\\":
            if pattern[pos + 1 : pos + 2] == "Q":
                return False
            pos += 2
            continue
        if in_class:
            if char == "[":
                return False
            in_class = char != "]"
        elif char == "[":
            in_class = True
            pos += 1 if pattern[pos + 1 : pos + 2] == "^" else 0
            pos += 1 if pattern[pos + 1 : pos + 2] == "]" else 0  # "[]...]": "]" is literal
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth <= 0:
            return False
        pos += 1
    return True


class PathRule(Protocol):
    """What :class:`PathIndex` needs of a policy (a ``PolicySpec`` is one)."""

    @property
    def path(self) -> str: ...

    @property
    def path_re(self) -> PathPattern | None: ...

    def applies_to_method(self, method: str) -> bool: ...


Rule = TypeVar("Rule", bound=PathRule)


class PathIndex(Generic[Rule]):
    """The path policies that apply to one method (every method: ``None``), by
    literal prefix: a path is searched only by those whose prefix starts it, and
    by those with none."""

    def __init__(self, ordered: tuple[Rule, ...], method: str | None) -> None:
        self.ordered = ordered
        self.scan_always: list[int] = []
        prefixes: dict[int, dict[str, list[int]]] = {}
        for rank, spec in enumerate(ordered):
            if spec.path_re is None or (method and not spec.applies_to_method(method)):
                continue
            prefix = literal_prefix(spec.path)
            if prefix:
                prefixes.setdefault(len(prefix), {}).setdefault(prefix, []).append(rank)
            else:
                self.scan_always.append(rank)
        self.prefixes = sorted(prefixes.items())

    def match(self, path: str, method: str | None = None) -> tuple[Rule, ...]:
        """The policies that match ``path``; ``method`` filters an every-method index."""
        ranks = list(self.scan_always)
        for length, by_prefix in self.prefixes:
            if length > len(path):
                break
            ranks.extend(by_prefix.get(path[:length], ()))
        ranks.sort()
        found = []
        for rank in ranks:
            spec = self.ordered[rank]
            assert spec.path_re is not None
            if (method is None or spec.applies_to_method(method)) and spec.path_re.search(path):
                found.append(spec)
        return tuple(found)
