"""The rate grammar: good and bad inputs, canonical strings, and fuzzing."""

from __future__ import annotations

import doctest
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_ratelimits import rates as rates_module
from django_ratelimits.exceptions import RateParseError
from django_ratelimits.rates import (
    MAX_LIMIT,
    MAX_PERIOD,
    MAX_TEXT_LENGTH,
    Rate,
    parse_period,
    parse_rate,
    parse_rates,
)
from tests.dashboard.test_i18n import WORD, Marking, unmark

GOOD = [
    ("10/s", (Rate(10, 1),)),
    ("120/m", (Rate(120, 60),)),
    ("240/h", (Rate(240, 3600),)),
    ("1000/d", (Rate(1000, 86_400),)),
    ("100/5m", (Rate(100, 300),)),
    ("5/30s", (Rate(5, 30),)),
    ("5/30 s", (Rate(5, 30),)),
    ("  7 / 2 h  ", (Rate(7, 7200),)),
    ("1/sec", (Rate(1, 1),)),
    ("1/Second", (Rate(1, 1),)),
    ("1/SECONDS", (Rate(1, 1),)),
    ("1/min", (Rate(1, 60),)),
    ("1/minute", (Rate(1, 60),)),
    ("1/Minutes", (Rate(1, 60),)),
    ("1/hour", (Rate(1, 3600),)),
    ("1/hours", (Rate(1, 3600),)),
    ("1/day", (Rate(1, 86_400),)),
    ("1/3 days", (Rate(1, 259_200),)),
    ("1/M", (Rate(1, 60),)),
    ("010/s", (Rate(10, 1),)),
    (f"{MAX_LIMIT}/s", (Rate(MAX_LIMIT, 1),)),
    ("1/30d", (Rate(1, MAX_PERIOD),)),
    ("1/720h", (Rate(1, MAX_PERIOD),)),
    ("1/2592000s", (Rate(1, MAX_PERIOD),)),
    ("10/s, 120/m, 240/h", (Rate(10, 1), Rate(120, 60), Rate(240, 3600))),
    ("10/s,120/m", (Rate(10, 1), Rate(120, 60))),
    ("\t10/s ,\n120/m\r\n", (Rate(10, 1), Rate(120, 60))),
    ("240/h, 10/s", (Rate(240, 3600), Rate(10, 1))),
]

# (input, position, reason): the exact error for a representative set.
BAD = [
    ("", 0, "empty input (expected a rate such as '10/s')"),
    ("   ", 0, "empty input (expected a rate such as '10/s')"),
    ("10/x", 3, "unknown unit 'x' (expected s, m, h or d)"),
    ("10/secs", 3, "unknown unit 'secs' (expected s, m, h or d)"),
    ("10/5 weeks", 5, "unknown unit 'weeks' (expected s, m, h or d)"),
    ("10/s,,5/m", 5, "empty rate (expected a rate such as '10/s')"),
    ("10/s,", 5, "empty rate (expected a rate such as '10/s')"),
    ("10/s, ", 6, "empty rate (expected a rate such as '10/s')"),
    (",10/s", 0, "empty rate (expected a rate such as '10/s')"),
    ("0/s", 0, f"limit must be between 1 and {MAX_LIMIT}, found 0"),
    ("1000001/s", 0, f"limit must be between 1 and {MAX_LIMIT}, found 1000001"),
    ("10/s, 0/m", 6, f"limit must be between 1 and {MAX_LIMIT}, found 0"),
    ("-1/s", 0, "expected a positive integer limit, found '-'"),
    ("+1/s", 0, "expected a positive integer limit, found '+'"),
    ("1.5/s", 1, "limit must be a whole number of ASCII digits, found '.'"),
    ("ten/s", 0, "expected an integer limit, found 't'"),
    ("/s", 0, "expected an integer limit, found '/'"),
    ("10", 2, "expected '/' after the limit, found the end of the input"),
    ("10 s", 3, "expected '/' after the limit, found 's'"),
    ("10/", 3, "expected a unit (s, m, h or d), found the end of the input"),
    ("10/5", 4, "expected a unit (s, m, h or d), found the end of the input"),
    ("10/-5s", 3, "expected a unit (s, m, h or d), found '-'"),
    ("10/0m", 3, "period multiplier must be at least 1, found 0"),
    ("10/2.5m", 4, "period multiplier must be a whole number of ASCII digits, found '.'"),
    ("10/31d", 3, f"period of 2678400 seconds is longer than 30 days ({MAX_PERIOD})"),
    ("10/2592001s", 3, f"period of 2592001 seconds is longer than 30 days ({MAX_PERIOD})"),
    ("10/s x", 5, "expected ',' or the end of the input after the rate, found 'x'"),
    ("10/s 5/m", 5, "expected ',' or the end of the input after the rate, found '5'"),
    ("10/s;5/m", 4, "expected ',' or the end of the input after the rate, found ';'"),
    ("\u0663/s", 0, "limit must use the ASCII digits 0-9, found '\u0663'"),
    ("1\u0660/s", 1, "limit must be a whole number of ASCII digits, found '\u0660'"),
    ("10/\u0665m", 3, "period multiplier must use the ASCII digits 0-9, found '\u0665'"),
    ("\uff11\uff10/s", 0, "limit must use the ASCII digits 0-9, found '\uff11'"),
    ("10/m, 20/60s", 9, "period '60s' repeats the period of '10/m' (each period may appear once)"),
    (
        "10/s, 5/1 second",
        8,
        "period '1 second' repeats the period of '10/s' (each period may appear once)",
    ),
    ("x" * (MAX_TEXT_LENGTH + 1), MAX_TEXT_LENGTH, "input is longer than 1000 characters"),
]


@pytest.mark.parametrize(("text", "expected"), GOOD)
def test_parse_rates_accepts(text: str, expected: tuple[Rate, ...]) -> None:
    assert parse_rates(text) == expected


@pytest.mark.parametrize(("text", "position", "reason"), BAD)
def test_parse_rates_rejects(text: str, position: int, reason: str) -> None:
    with pytest.raises(RateParseError) as caught:
        parse_rates(text)
    assert (caught.value.position, caught.value.reason) == (position, reason)
    assert caught.value.text == text
    assert str(caught.value).endswith(f" at position {position}: {reason}")
    if len(text) <= 80:
        assert str(caught.value) == f"invalid rate {text!r} at position {position}: {reason}"


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        *((parse_rates, text) for text, _, _ in BAD),
        (parse_rates, "10/s," + " " * 100 + "10/x"),  # quoted as an excerpt and its length
        (parse_period, ""),
        (parse_period, "10m x"),
    ],
)
def test_an_error_is_translatable_whole(parse: Callable[[str], object], text: str) -> None:
    """Translated as a page shows it, every word of the message comes from a template a
    catalog can hold; what is left is what was typed (quoted) and numbers. The English
    text stays what ``str()`` says."""
    with pytest.raises(RateParseError) as caught:
        parse(text)
    translated = caught.value.translatable.translate(Marking().gettext)
    left, marked = unmark(translated)
    assert marked >= 2  # the message and its reason
    assert WORD.findall(re.sub(r"'[^']*'", " ", left)) == [], translated
    assert str(caught.value.translatable) == str(caught.value)
    assert caught.value.translatable.translate(lambda message: message) == str(caught.value)


def test_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown unit"):
        parse_rate("10/x")


def test_parse_rate_takes_exactly_one() -> None:
    assert parse_rate(" 100/5m ") == Rate(100, 300)
    with pytest.raises(RateParseError) as caught:
        parse_rate("10/s, 20/m")
    assert (caught.value.position, caught.value.reason) == (
        4,
        "expected exactly one rate, found ','",
    )
    with pytest.raises(RateParseError) as caught:
        parse_rate("10/s,")
    assert caught.value.position == 4


def test_text_must_be_a_str() -> None:
    with pytest.raises(TypeError, match="must be a str, not bytes"):
        parse_rates(b"10/s")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rate", "text"),
    [
        (Rate(10, 1), "10/s"),
        (Rate(120, 60), "120/m"),
        (Rate(100, 300), "100/5m"),
        (Rate(5, 30), "5/30s"),
        (Rate(1000, 86_400), "1000/d"),
        (Rate(1, 90), "1/90s"),
        (Rate(1, 5400), "1/90m"),
        (Rate(1, 7200), "1/2h"),
        (Rate(1, 90_000), "1/25h"),
        (Rate(1, MAX_PERIOD), "1/30d"),
    ],
)
def test_canonical_string(rate: Rate, text: str) -> None:
    assert str(rate) == text
    assert parse_rate(text) == rate


def test_window_us() -> None:
    assert Rate(10, 1).window_us == 1_000_000
    assert Rate(1, MAX_PERIOD).window_us == MAX_PERIOD * 1_000_000


def test_rates_order_by_limit_then_period() -> None:
    assert sorted([Rate(2, 1), Rate(1, 60), Rate(1, 1)]) == [Rate(1, 1), Rate(1, 60), Rate(2, 1)]
    assert len({Rate(1, 1), Rate(1, 1)}) == 1


@pytest.mark.parametrize(
    ("limit", "period", "error"),
    [
        (0, 1, ValueError),
        (MAX_LIMIT + 1, 1, ValueError),
        (1, 0, ValueError),
        (1, MAX_PERIOD + 1, ValueError),
        (1.5, 1, TypeError),
        (True, 1, TypeError),
        (1, "1", TypeError),
    ],
)
def test_rate_validates_its_fields(limit: object, period: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        Rate(limit, period)  # type: ignore[arg-type]


valid_rates = st.builds(Rate, st.integers(1, MAX_LIMIT), st.integers(1, MAX_PERIOD))


@given(valid_rates)
def test_canonical_string_parses_back(rate: Rate) -> None:
    assert parse_rate(str(rate)) == rate


@given(st.lists(valid_rates, min_size=1, max_size=6, unique_by=lambda r: r.period))
def test_joined_canonical_strings_parse_back(rates: list[Rate]) -> None:
    assert parse_rates(", ".join(map(str, rates))) == tuple(rates)


def _parses_or_rejects(text: str) -> None:
    try:
        rates = parse_rates(text)
    except RateParseError as error:
        assert error.text == text
        assert 0 <= error.position <= len(text)
    else:
        assert rates
        assert parse_rates(", ".join(map(str, rates))) == rates


@settings(max_examples=500)
@given(st.text())
def test_any_text_parses_or_raises_rate_parse_error(text: str) -> None:
    _parses_or_rejects(text)


@settings(max_examples=300)
@given(st.text(alphabet="0123456789/,. smhdSMHDecondayrui\t{}-+\x00\u0663", max_size=40))
def test_near_miss_text_parses_or_raises_rate_parse_error(text: str) -> None:
    _parses_or_rejects(text)


@settings(max_examples=20)
@given(st.text(min_size=1, max_size=100).map(lambda s: s * (10_000 // len(s) + 1)))
def test_huge_text_is_rejected_at_the_length_cap(text: str) -> None:
    _parses_or_rejects(text)
    with pytest.raises(RateParseError) as caught:
        parse_rates(text)
    assert caught.value.position == MAX_TEXT_LENGTH


@pytest.mark.parametrize(
    "text",
    [
        "1" * MAX_TEXT_LENGTH,
        "1/" + "s" * (MAX_TEXT_LENGTH - 2),
        "1/" + "1" * (MAX_TEXT_LENGTH - 3) + "s",
        ",".join(["1/s"] * 250),
        " " * (MAX_TEXT_LENGTH - 1) + "x",
    ],
)
def test_worst_case_inputs_are_fast(text: str) -> None:
    _parses_or_rejects(text)


def test_docstring_examples() -> None:
    assert doctest.testmod(rates_module).failed == 0


def test_error_messages_quote_a_bounded_excerpt_of_long_input() -> None:
    text = "10/s," + " " * 900 + "10/x"
    with pytest.raises(RateParseError) as caught:
        parse_rates(text)
    message = str(caught.value)
    assert len(message) < 250
    assert "10/x" in message and f"({len(text)} characters)" in message
    assert caught.value.text == text
