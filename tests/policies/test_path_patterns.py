"""Path patterns run by RE2: what Python's ``re`` matched, without its backtracking.

No test here times anything: a backtracking matcher needs years for the
adversarial paths below, so getting an answer at all is the proof.
"""

from __future__ import annotations

import itertools
import re

import pytest
from django.core.exceptions import ValidationError

from django_ratelimits.policies.matching import PathPattern, PatternError
from django_ratelimits.policies.parse import check_path_start, parse_path

CATASTROPHIC = r"^/(\w+-?)*$"
# Word characters, then what the pattern cannot match: Python's re tries every way of
# cutting the run into (\w+-?) pieces first, 2**(n-1) of them.
ADVERSARIAL = ["/" + "a" * 40 + "!", "/" + "a" * 4998 + "!", "/" + "a" * 40 + "--"]


def test_the_catastrophic_pattern_is_accepted_by_the_policy_field() -> None:
    assert parse_path(CATASTROPHIC) is not None


def test_the_catastrophic_pattern_matches_what_python_re_matched() -> None:
    # Every path of up to 7 characters from this alphabet: short enough for re.
    python = re.compile(CATASTROPHIC)
    ours = PathPattern(CATASTROPHIC)
    for length in range(8):
        for chars in itertools.product("/a-!_", repeat=length):
            path = "".join(chars)
            assert ours.search(path) == bool(python.search(path)), path


@pytest.mark.parametrize("path", ADVERSARIAL, ids=len)
def test_adversarial_paths_get_an_answer(path: str) -> None:
    assert PathPattern(CATASTROPHIC).search(path) is False
    assert PathPattern(CATASTROPHIC).search(path[:-1]) is True


@pytest.mark.parametrize("pattern", ["^/login/$", r"^/login/\z"])
def test_a_final_newline_does_not_take_a_path_out_of_a_policy(pattern: str) -> None:
    # As with Python's $: otherwise /login/%0A, which re_path(r"^login/$") serves,
    # would escape the policy of ^/login/$.
    login = PathPattern(pattern)
    assert login.search("/login/\n") and login.search("/login/")
    assert not login.search("/login/\n\n") and not login.search("/login/x")


@pytest.mark.parametrize(
    ("pattern", "path"),
    [(r"^/api/.*/export$", "/api/x\ny/export"), (r"^/reports/.+/$", "/reports/q1\n/")],
)
def test_a_newline_inside_a_segment_does_not_take_a_path_out_of_a_policy(
    pattern: str, path: str
) -> None:
    # Django's <str:name> is [^/]+: it takes a newline, so /api/x%0Ay/export reaches the
    # view routed at api/<str:name>/export. RE2's "." did not match it.
    assert PathPattern(pattern).search(path)


@pytest.mark.django_db
def test_a_newline_inside_a_segment_is_limited_through_the_site(site_redis: object) -> None:
    from django.test import Client, override_settings

    from django_ratelimits.models import Policy
    from django_ratelimits.policies import get_registry

    Policy.objects.create(name="export", rates="2/h", path=r"^/api/.*/export$")
    get_registry().refresh()
    with override_settings(ROOT_URLCONF="tests.segment_urls"):
        client = Client()
        assert [client.get("/api/a/export").status_code for _ in range(3)] == [200, 200, 429]
        response = client.get("/api/x%0Ay/export")
        assert response.status_code == 429
        assert client.get("/api/b/export").status_code == 429


def test_a_path_that_is_not_valid_unicode_is_searched_not_raised() -> None:
    assert PathPattern("^/a").search("/a\udc80") is True
    assert PathPattern("b$").search("/a\udc80") is False


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "invalid escape sequence: \\1"),
        ("(?=a)", "invalid perl operator: (?="),
        ("a(?#x)*", "invalid perl operator: (?#"),
        ("a{1001}", "invalid repetition size: {1001}"),
        ("((a{100}){100}){100}", "invalid repetition size: {100}"),
        (r"\pL{1000}" * 4, "pattern too large"),
        ("\ud800", "not valid Unicode"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_with_its_reason(pattern: str, reason: str) -> None:
    with pytest.raises(PatternError, match=re.escape(reason)):
        PathPattern(pattern)


@pytest.mark.parametrize(
    ("pattern", "fixed"),
    [("^api/", "^/api/"), (r"\Aapi/hello", r"\A/api/hello"), ("^api/hello$", "^/api/hello$")],
)
def test_a_start_anchored_pattern_without_its_slash_is_refused_with_the_fix(
    pattern: str, fixed: str
) -> None:
    # Written as Django's routes are (path("api/")): every path_info starts with "/", so
    # the policy would limit no request, quietly (an attack review found admin saved it).
    with pytest.raises(ValidationError) as refused:
        check_path_start(pattern)
    assert refused.value.messages[0].endswith(f"limits no request. Write {fixed}.")
    check_path_start(fixed)
    assert parse_path(pattern) is not None  # RE2 runs it: a row that has one still loads


@pytest.mark.parametrize("pattern", ["api/", "^/api/", r"^\/api", "^(api|/api)/", "^.*api/"])
def test_patterns_that_can_match_a_path_are_accepted(pattern: str) -> None:
    check_path_start(pattern)
