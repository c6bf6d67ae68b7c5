"""``quick_init``: the frozen dataclasses a request builds get the same instances, cheaper.

Each case builds a class twice from one body, once as ``@dataclass(frozen=True)``
makes it and once with ``quick_init`` on top, and asserts that every way of calling
it gives the same instance (the same ``__dict__``, in the same order), the same
errors, and that the instance stays frozen.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from django_ratelimits.decide import Verdict
from django_ratelimits.engine import Check, Decision, Gate, Identity, Limit, LimitResult
from django_ratelimits.frozen import quick_init
from django_ratelimits.rates import Rate


def _both(make: Any) -> tuple[type, type]:
    """The class ``make()`` defines, as the dataclass makes it and with ``quick_init``."""
    return make(), quick_init(make())


def _every_feature() -> type:
    @dataclass(frozen=True)
    class Sample:
        first: str
        second: int = 2
        items: tuple[int, ...] = field(default_factory=tuple)
        listed: list[int] = field(default_factory=list)
        computed: str = field(init=False, default="class attribute")
        made: list[int] = field(init=False, default_factory=lambda: [7])
        derived: str = field(init=False, repr=False, compare=False)
        named: bool = field(default=False, kw_only=True)

        def __post_init__(self) -> None:
            if self.first == "refused":
                raise ValueError("refused")
            object.__setattr__(self, "derived", self.first * 2)

    return Sample


CALLS: list[tuple[tuple[object, ...], dict[str, object]]] = [
    (("a",), {}),
    (("a", 5), {}),
    (("a", 5, (1, 2), [3]), {"named": True}),
    ((), {"first": "b", "listed": [9], "named": False}),
    (("c",), {"items": (4,)}),
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_same_instance_every_way_of_calling(args: tuple[object, ...], kwargs: dict[str, object]):
    plain, quick = _both(_every_feature)
    expected, got = plain(*args, **kwargs), quick(*args, **kwargs)
    assert list(vars(got).items()) == list(vars(expected).items())
    assert repr(got).replace("quick", "") == repr(expected)
    assert dataclasses.astuple(got) == dataclasses.astuple(expected)


def test_default_factories_make_a_new_value_each_call():
    _, quick = _both(_every_feature)
    one, two = quick("a"), quick("a")
    assert one.listed == [] and one.listed is not two.listed
    assert one.made == [7] and one.made is not two.made


def test_same_errors():
    plain, quick = _both(_every_feature)
    for cls in (plain, quick):
        with pytest.raises(ValueError, match="refused"):
            cls("refused")
        with pytest.raises(TypeError):
            cls()  # first is required
        with pytest.raises(TypeError):
            cls("a", 1, (), [], True)  # named is keyword-only
        with pytest.raises(TypeError):
            cls("a", computed="x")  # not a parameter


def test_stays_frozen_compared_hashed_and_pickled():
    _, quick = _both(_every_feature)
    instance = quick("a", 5, (1,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        instance.second = 6  # type: ignore[misc]
    assert instance == quick("a", 5, (1,)) and instance != quick("a", 6, (1,))
    assert dataclasses.replace(instance, second=6).second == 6


def test_same_signature():
    plain, quick = _both(_every_feature)
    assert str(inspect.signature(quick)) == str(inspect.signature(plain))


def test_refuses_what_it_would_not_reproduce():
    @dataclass(frozen=True)
    class WithInitVar:
        value: int
        scale: InitVar[int] = 1

    @dataclass
    class Mutable:
        value: int

    @dataclass(frozen=True, slots=True)
    class Slotted:
        value: int

    for cls in (WithInitVar, Mutable, Slotted):
        with pytest.raises(TypeError):
            quick_init(cls)


def test_the_request_path_classes():
    """The classes every request builds: the same instances as their dataclass's own
    ``__init__`` gives (called as the dataclass module calls it), and still frozen."""
    ip = Identity("ip", "10.0.0.1")
    limit = Limit("api", Rate(10, 60))
    result = LimitResult(ip, limit, True, 9, 0, 6_000_000)
    cases = [
        ip,
        Gate(ip, Rate(50, 3600)),
        Check(ip),
        Check(ip, (limit,), "head", shadow=True, costs=(2,), soft=True),
        result,
        Decision((result,), 1_000),
        Verdict((), Decision((result,), 1_000), cached=True),
    ]
    for instance in cases:
        with pytest.raises(dataclasses.FrozenInstanceError):
            object.__getattribute__(instance, "__class__").__setattr__(instance, "x", 1)
        assert pickle.loads(pickle.dumps(instance)) == instance
        cls = type(instance)
        copy = cls(**{f.name: getattr(instance, f.name) for f in dataclasses.fields(instance)})
        assert list(vars(copy).items()) == list(vars(instance).items())
    assert Check(ip).limits == () and Check(ip).gate is None
    with pytest.raises(ValueError, match="identity kind"):
        Identity("Not A Kind", "x")
