"""A cheaper ``__init__`` for the frozen dataclasses every request builds.

A frozen dataclass's generated ``__init__`` stores each field with
``object.__setattr__(self, name, value)``, the way round its own ``__setattr__``,
which refuses: on CPython 3.11 a ten-field :class:`~django_ratelimits.engine.Check`
costs about 19,000 instructions that way, and about 8,000 when its fields are put in
the instance's ``__dict__`` in one ``update``, which is where ``object.__setattr__``
puts them (no field of these classes is a descriptor), and where they are as quick to
read (stored one item at a time, each read costs twice as much). :func:`quick_init`
gives a class that ``__init__``: the same parameters, defaults and default factories,
the same ``__post_init__`` call, the same instance. The class stays frozen (its
``__setattr__`` still refuses), compared and hashed as before.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

__all__ = ["quick_init"]

T = TypeVar("T")


class _Factory:
    """The default of a parameter whose field has a default factory (shown as the
    dataclass's own shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def quick_init(cls: type[T]) -> type[T]:
    """Replace the generated ``__init__`` of the frozen dataclass ``cls`` (decorate it
    after ``@dataclass(frozen=True)``) by one that stores the fields in the instance's
    ``__dict__``. Refuses a class whose ``__init__`` parameters it would not reproduce
    (an ``InitVar``), and one with slots (no ``__dict__``)."""
    params = dataclasses.fields(cls)  # type: ignore[arg-type]
    options = getattr(cls, "__dataclass_params__", None)
    if options is None or not options.frozen or hasattr(cls, "__slots__"):
        raise TypeError(f"{cls.__name__}: quick_init is for frozen dataclasses without slots")
    namespace: dict[str, Any] = {"_FACTORY": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    stored: list[str] = []
    for f in params:
        value = f.name
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            value = f"_default_{f.name}"
            parameter = f"{f.name}=_default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            value = f"_factory_{f.name}()"
            parameter = f"{f.name}=_FACTORY"
        else:
            parameter = f.name
        if f.init:
            (keyword if f.kw_only else positional).append(parameter)
            if f.default_factory is not dataclasses.MISSING:
                value = f"{value} if {f.name} is _FACTORY else {f.name}"
            else:
                value = f.name
        elif f.default_factory is dataclasses.MISSING:  # the class attribute is its value,
            continue  # or __post_init__ sets it: the dataclass's __init__ stores nothing
        stored.append(f"{f.name}={value}")
    # One update of the whole dict: stored item by item, the fields are slower to read.
    body = [f"    self.__dict__.update({', '.join(stored)})"]
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    exec(f"def __init__({signature}):\n" + "\n".join(body), namespace)
    init = namespace["__init__"]
    _same_parameters(cls, init)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(cls.__init__.__annotations__)  # what the signature shows
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def _same_parameters(cls: type, init: Any) -> None:
    """Raise unless ``init`` takes the parameters of ``cls``'s own ``__init__``, in order,
    of the same kinds, with the same defaults (a default factory's aside)."""
    theirs = list(inspect.signature(cls.__init__).parameters.values())  # type: ignore[misc]
    ours = list(inspect.signature(init).parameters.values())
    same = [(p.name, p.kind) for p in theirs] == [(p.name, p.kind) for p in ours]
    pairs = zip(theirs, ours, strict=False)  # of the same length when ``same``
    if not same or any(t.default is not o.default for t, o in pairs if o.default is not _FACTORY):
        raise TypeError(f"{cls.__name__}: quick_init cannot reproduce its __init__")
