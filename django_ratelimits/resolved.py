"""What Django's resolver says of a request's path, as far as limiting needs it.

Two questions are asked of every limited request: which policies the view names
with ``@ratelimit`` (the middleware decides them with the path's own), which of
them refuse nothing when they deny (``block=False``), and
whether the view belongs to an admin site (the way back from a block,
:mod:`django_ratelimits.way_back`). One resolve answers both. It costs about a
tenth of a Redis round trip, and Django resolves again for the view, so
answers are cached per (URLconf, language, path); a path longer than
:data:`~django_ratelimits.policies.matching.CACHE_PATH_MAX` (rare, often
hostile) is resolved without being cached.

The language is part of the question: under ``i18n_patterns`` ``/fr/admin/login/``
reaches admin's login only while French is active, and a translated route
(``path(_("chat/"), ...)``) names another view in another language. A path is
resolved in the language Django resolves it in (:func:`resolving_language`): the one
its prefix names, under ``i18n_patterns``, whichever of ``LocaleMiddleware`` and the
limiter comes first; else the active one.

A site that serves its pages under language prefixes (``i18n_patterns``) serves
``/login/``, ``/fr/login/`` and ``/de/login/`` from one view: :func:`unprefixed`
gives the path a path pattern is also searched in (``/login/``), so that a client
does not escape a page's policy by naming a language.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Final, Literal, NamedTuple

from django.conf import settings
from django.conf.urls.i18n import is_language_prefix_patterns_used
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import Http404, HttpRequest
from django.urls import URLResolver, get_resolver, resolve
from django.urls.resolvers import LocalePrefixPattern, RegexPattern, RoutePattern
from django.utils import translation
from django.utils.translation import get_language, get_language_from_path

from django_ratelimits.policies.matching import CACHE_PATH_MAX, literal_prefix

__all__ = [
    "VIEW_POLICIES",
    "VIEW_SOFT",
    "AdminView",
    "LanguageInPattern",
    "Resolved",
    "language_in_pattern",
    "resolved",
    "resolving_language",
    "unprefixed",
    "without_language",
]

VIEW_POLICIES: Final = "ratelimit_policies"
"""Attribute ``@ratelimit`` sets on a view: the names of the policies it applies."""
VIEW_SOFT: Final = "ratelimit_soft_policies"
"""Attribute ``@ratelimit`` sets on a view: the policies it applies with ``block=False``."""

AdminView = Literal["login", "other"] | None


class Resolved(NamedTuple):
    policies: tuple[str, ...]
    """The policies the view names with ``@ratelimit``."""
    admin: AdminView
    """``"login"``, ``"other"`` (another view of an admin site) or ``None``."""
    soft: frozenset[str] = frozenset()
    """Those of :attr:`policies` whose denial the view lets through (``block=False``)."""


_NOWHERE: Final = Resolved((), None)


def resolved(request: HttpRequest) -> Resolved:
    """What the resolver says of ``request``'s path."""
    urlconf = getattr(request, "urlconf", None) or _root_urlconf()
    path = request.path_info
    language = resolving_language(urlconf, path)
    if len(path) > CACHE_PATH_MAX:
        return _resolve.__wrapped__(urlconf, language, path)
    return _resolve(urlconf, language, path)


def resolving_language(urlconf: str, path: str) -> str:
    """The language Django resolves ``path`` in, with ``urlconf``; ``""`` when no route
    of ``urlconf`` depends on the language (the answer is the same in every one).

    Under ``i18n_patterns`` it is the one ``LocaleMiddleware`` activates for the path:
    the language its first segment names (``fr`` for ``/fr/admin/login/``), else the
    default language when that one is served unprefixed. The middleware may come
    before ``LocaleMiddleware``, where the active language is the one the thread's
    previous request left (``LocaleMiddleware`` never deactivates it): resolving in
    that one would miss ``/fr/admin/login/`` after an English request. Any other path
    (translated routes alone, an unprefixed path where every language is prefixed) is
    resolved in the active language, the request's once ``LocaleMiddleware`` has run."""
    site = _languages(urlconf)
    if not site.matter:
        return ""
    if site.prefixed:
        named = _path_language(path)
        if named is not None:
            return named
        if not site.default_prefixed:
            return site.default
    return get_language()


class _Languages(NamedTuple):
    matter: bool
    """Whether a route of the URLconf depends on the active language."""
    prefixed: bool
    """``i18n_patterns`` at its root."""
    default_prefixed: bool
    """Whether they prefix the default language too."""
    default: str
    """``LANGUAGE_CODE``."""


@functools.lru_cache(maxsize=64)
def _languages(urlconf: str) -> _Languages:
    """How ``urlconf``'s routes depend on the language: read once per URLconf (a site
    without translated routes nor ``i18n_patterns`` then pays no language lookup, about
    2.5 µs, per request)."""
    prefixed, default_prefixed = is_language_prefix_patterns_used(urlconf)
    try:
        matter = _depends_on_language(get_resolver(urlconf).url_patterns)
    except Exception:  # a broken URLconf: resolving it says what is wrong
        matter = True
    return _Languages(matter, prefixed, default_prefixed, str(settings.LANGUAGE_CODE))


def _depends_on_language(entries: Iterable[object], *, prefixes: bool = True) -> bool:
    """Whether a route among ``entries`` (and the URLconfs they include) matches
    according to the active language: a language prefix (``i18n_patterns``; unless
    ``prefixes`` is false, when what lies under one is passed over: its prefix names
    the language), a translated route or regular expression (a lazy string), or a
    pattern class of another kind, which may."""
    for entry in entries:
        pattern = getattr(entry, "pattern", None)
        if isinstance(pattern, RoutePattern):  # Django keeps the text as given
            text: object = getattr(pattern, "_route", None)
        elif isinstance(pattern, RegexPattern):
            text = getattr(pattern, "_regex", None)
        elif isinstance(pattern, LocalePrefixPattern) and not prefixes:
            continue
        else:
            return True
        if not isinstance(text, str):
            return True
        if isinstance(entry, URLResolver) and _depends_on_language(
            entry.url_patterns, prefixes=prefixes
        ):
            return True
    return False


def translated_routes(urlconf: str) -> bool:
    """Whether ``urlconf`` has routes that name other views in other languages
    (``path(_("chat/"), ...)``) outside ``i18n_patterns`` (under it, the path's prefix
    names the language): their resolve depends on the language ``LocaleMiddleware``
    activates for the request (system check W016)."""
    return _depends_on_language(get_resolver(urlconf).url_patterns, prefixes=False)


def unprefixed(request: HttpRequest) -> str | None:
    """``request``'s path without its language prefix (``/login/`` for ``/fr/login/``)
    when its URLconf serves pages under language prefixes; None when it does not, or
    the path starts with no language (:func:`without_language`).

    Django routes ``/fr/login/`` to the view of ``login/`` (``LocalePrefixPattern``),
    so a path pattern written for the page must be searched in ``/login/`` too."""
    urlconf = getattr(request, "urlconf", None)
    if not (_root() if urlconf is None else _languages(urlconf)).prefixed:
        return None
    return without_language(request.path_info)


@functools.cache
def _root() -> _Languages:
    """:func:`_languages` of the root URLconf, without reading a setting (each costs
    about 0.4 µs): a site that uses no ``i18n_patterns`` pays a cached call."""
    return _languages(_root_urlconf())


@functools.cache
def _root_urlconf() -> str:
    """``ROOT_URLCONF``, read once (a setting is read through Django's lazy settings
    object, about 0.4 µs, and every limited request asks twice): forgotten when the
    setting changes, as :func:`_root` is."""
    urlconf: str = settings.ROOT_URLCONF
    return urlconf


def without_language(path: str) -> str | None:
    """``path`` without its first segment, if that segment names a language of
    ``LANGUAGES`` as ``LocaleMiddleware`` reads it (``get_language_from_path``: ``fr``,
    ``fr-ca`` when only ``fr`` is listed...); else None. ``/fr`` gives ``/``.

    Every path that reaches a view under a language prefix starts with one such
    segment; a path whose segment Django would not serve (``/fr-ca/`` with only ``fr``
    listed) is counted as the page too, which only counts a 404."""
    if _path_language(path) is None:
        return None
    end = path.find("/", 1)
    return "/" if end < 0 else path[end:]


def _path_language(path: str) -> str | None:
    """The language of ``LANGUAGES`` that ``path``'s first segment names, as
    ``LocaleMiddleware`` reads it (``fr`` for ``/fr-ca/...`` when only ``fr`` is
    listed), or None."""
    end = path.find("/", 1)
    segment = path[1:] if end < 0 else path[1:end]
    if len(segment) > CACHE_PATH_MAX:
        return _named_language.__wrapped__(segment)
    return _named_language(segment)


class LanguageInPattern(NamedTuple):
    prefix: str
    """The language prefix the pattern starts with: ``/en/``."""
    fixed: str | None
    """The pattern without it (``^/login/``), None when its text does not start with
    the prefix as written (``^/en\\/login``)."""


def language_in_pattern(pattern: str) -> LanguageInPattern | None:
    """The language prefix a path pattern starts with (``/en/`` of ``^/en/login/``), on
    a site whose root URLconf serves pages under language prefixes; else None.

    Such a pattern limits the page in that language alone: ``^/login/`` limits it in
    every language (:func:`unprefixed`). The URLconf is imported only for a pattern
    that starts with a language."""
    prefix = literal_prefix(pattern) if pattern else ""
    end = prefix.find("/", 1)
    if end < 0 or without_language(prefix) is None or not _root().prefixed:
        return None
    language = prefix[: end + 1]
    anchor = "^" if pattern.startswith("^") else "\\A"
    rest = pattern[len(anchor) :]
    fixed = anchor + rest[end:] if rest.startswith(language) else None
    return LanguageInPattern(language, fixed)


@functools.lru_cache(maxsize=4096)
def _named_language(segment: str) -> str | None:
    """The language a path's first ``segment`` names, or None. Django's answer costs 3
    to 12 µs (its regular expression is a lazy object, and a segment that is no
    language raises an error it does not cache); cached, about 0.1 µs."""
    return get_language_from_path(f"/{segment}/")


@functools.lru_cache(maxsize=4096)
def _resolve(urlconf: str, language: str, path: str) -> Resolved:
    try:
        if language:
            with translation.override(language):
                match = resolve(path, urlconf)
        else:
            match = resolve(path, urlconf)
    except Http404:
        return _NOWHERE
    policies = getattr(match.func, VIEW_POLICIES, ())
    soft = frozenset(getattr(match.func, VIEW_SOFT, ()))
    if match.app_name != "admin":  # every AdminSite's URLs have the app name "admin"
        return Resolved(policies, None, soft)
    return Resolved(policies, "login" if match.url_name == "login" else "other", soft)


@receiver(setting_changed)
def _forget_views(*, setting: str, **kwargs: object) -> None:
    if setting == "ROOT_URLCONF" or setting in _LANGUAGE_SETTINGS:
        _resolve.cache_clear()
        _languages.cache_clear()
        _root.cache_clear()
        _root_urlconf.cache_clear()
    if setting in _LANGUAGE_SETTINGS:
        _named_language.cache_clear()


_LANGUAGE_SETTINGS: Final = frozenset({"LANGUAGES", "LANGUAGE_CODE", "LOCALE_PATHS", "USE_I18N"})
"""The settings whose change may change which path segments name a language."""
