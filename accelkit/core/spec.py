"""The one mechanism behind every vocabulary type: typed fields, validation, JSON round trip.

A spec is a frozen, slotted, keyword-only dataclass. Each field is declared with :func:`spec_field`,
which carries its help text, numeric bounds and whether it must be finite; ``Literal[...]`` annotations carry the
accepted choices. NaN is refused in every float field; inf only in those declared ``finite=True`` — a field may
mean something by it (a load test's request rate inf: every request at once) and results carry it (a ratio over 0).
``__post_init__`` checks every field against its annotation, so a bad value fails at construction with a
``ValueError`` that names the field and what it accepts. ``to_dict``/``from_dict`` are lossless for the
types used here (bool, int, float, str, None, Literal, tuples, lists, dicts and nested specs).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

__all__ = ["Spec", "finite_fix", "spec_field"]

T = TypeVar("T", bound="Spec")
_MISSING = dataclasses.MISSING
_HINTS: dict[type, dict[str, Any]] = {}


def spec_field(
    default: Any = _MISSING,
    *,
    doc: str,
    min: float | None = None,
    max: float | None = None,
    finite: bool = False,
    default_factory: Any = _MISSING,
) -> Any:
    """Declare a spec field with its help text and optional inclusive numeric bounds. ``finite``: inf and -inf are
    refused too (after the bounds, whose message a bounded field keeps), for a number where infinity means nothing:
    ``PlanOptions(target_tokens_per_s=math.inf)`` searched 65,536 devices, a learning rate of inf trained on it."""
    meta = {"doc": doc, "min": min, "max": max, "finite": finite}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


#: what a float field's number is, by how its name ends, and an example of one (shown when the field has no finite
#: default of its own): the fix a non-finite value's error gives
_NUMBER_WORDS = (("tokens_per_s", "a throughput in tokens/s", "2e6"), ("bytes_per_s", "a bandwidth in bytes/s", "5e11"),
                 ("_hour", "dollars per hour", "100"), ("_gbps", "a bandwidth in Gb/s", "400"),
                 ("_gb", "gigabytes", "80"), ("_w", "watts", "700"), ("_ms", "milliseconds", "200"),
                 ("_s", "seconds", "0.05"), ("lr", "a learning rate", "1e-3"))


def finite_fix(field: str, default: Any = None) -> str:
    """What to give instead of a non-finite value for ``field``: 'a throughput in tokens/s such as 2e6', 'a
    learning rate such as 0.0001' (the field's own finite default as the example where it has one)."""
    what, example = next(((w, e) for end, w, e in _NUMBER_WORDS if field.endswith(end)), ("a number", "1"))
    if isinstance(default, (int, float)) and not isinstance(default, bool) and math.isfinite(default) and default:
        example = f"{default:g}".replace("e+", "e")  # 5e10, as the table's examples are written
    return f"{what} such as {example}"


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp))
    if tp is type(None):
        return "None"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp)


def _check(name: str, value: Any, tp: Any) -> Any:
    """Return ``value`` (possibly normalised, e.g. int → float, list → tuple) or raise ValueError."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        return _check_literal(name, value, tp)
    if origin in (Union, types.UnionType):
        return _check_union(name, value, tp)
    if tp in _SCALARS:
        return _SCALARS[tp](name, value)
    if origin in (tuple, list, dict):
        return _check_container(name, value, tp)
    if isinstance(tp, type) and issubclass(tp, Spec):
        if isinstance(value, tp):
            return value
        if isinstance(value, dict):
            return tp.from_dict(value)
        raise ValueError(f"{name}={value!r} is not valid; expected {tp.__name__}")
    raise TypeError(f"spec field {name} has an unsupported annotation {tp!r}")


def _check_literal(name: str, value: Any, tp: Any) -> Any:
    for choice in get_args(tp):
        # `is`-style match for bools so that 0/1 never pass as False/True and vice versa
        if type(choice) is type(value) and choice == value:
            return value
    raise ValueError(f"{name}={value!r} is not valid; expected {_describe(tp)}")


def _check_union(name: str, value: Any, tp: Any) -> Any:
    if type(value) in get_args(tp):  # exact arm first: an int in `float | int` stays an int
        return _check(name, value, type(value))
    for arm in get_args(tp):
        try:
            return _check(name, value, arm)
        except _OutOfRange:
            raise
        except ValueError:
            continue
    raise ValueError(f"{name}={value!r} is not valid; expected {_describe(tp)}")


def _check_none(name: str, value: Any) -> None:
    if value is None:
        return None
    raise ValueError(f"{name}={value!r} is not valid; expected None")


def _check_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"{name}={value!r} is not valid; expected true or false")


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{name}={value!r} is not valid; expected an integer")


class _OutOfRange(ValueError):
    """A number no float can hold: no other arm of a union takes it either, so its own message stands."""


def _check_float(name: str, value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and math.isnan(value):
            raise ValueError(f"{name} is NaN; expected a number")
        try:
            return float(value)
        except OverflowError:  # an integer literal past 1.8e308 (JSON and YAML read 1 and 400 zeros as an int)
            raise _OutOfRange(f"{name} is an integer beyond ±1.8e308: out of range; expected a finite number") from None
    raise ValueError(f"{name}={value!r} is not valid; expected a number")


def _check_str(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    raise ValueError(f"{name}={value!r} is not valid; expected a string")


#: the scalar annotations and their checks (bool before int: a bool is an int to isinstance)
_SCALARS: dict[Any, Callable[[str, Any], Any]] = {
    type(None): _check_none, bool: _check_bool, int: _check_int, float: _check_float, str: _check_str}


def _check_container(name: str, value: Any, tp: Any) -> Any:
    """A tuple (fixed or ``...``), list or dict annotation: each item checked against its own."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{name}={value!r} is not valid; expected a mapping")
        key_tp, val_tp = args
        return {
            _check(f"{name} key", k, key_tp): _check(f"{name}[{k!r}]", v, val_tp)
            for k, v in value.items()
        }
    if not isinstance(value, (tuple, list)):
        raise ValueError(f"{name}={value!r} is not valid; expected {'a list' if origin is list else 'a sequence'}")
    if origin is list:
        (arg,) = args
        return [_check(f"{name}[{i}]", v, arg) for i, v in enumerate(value)]
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_check(f"{name}[{i}]", v, args[0]) for i, v in enumerate(value))
    if len(args) != len(value):
        raise ValueError(f"{name} has {len(value)} items; expected {len(args)}")
    return tuple(_check(f"{name}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args, strict=True)))


def _to_json(value: Any) -> Any:
    if isinstance(value, Spec):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    return value


class Spec:
    """Base of the vocabulary types. Subclasses are ``@dataclass(frozen=True, slots=True, kw_only=True)``."""

    __slots__ = ()

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = _check(f.name, getattr(self, f.name), hints[f.name])
            lo, hi = f.metadata.get("min"), f.metadata.get("max")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if lo is not None and value < lo:
                    raise ValueError(f"{f.name}={value!r} is out of range; expected >= {lo}")
                if hi is not None and value > hi:
                    raise ValueError(f"{f.name}={value!r} is out of range; expected <= {hi}")
                if isinstance(value, float) and math.isinf(value) and f.metadata.get("finite"):
                    raise ValueError(f"{f.name}={value!r} is not a finite number; expected "
                                     f"{finite_fix(f.name, f.default)}")
            object.__setattr__(self, f.name, value)
        self.validate()

    def validate(self) -> None:
        """Cross-field checks; subclasses override. Raise ValueError naming the fields."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``from_dict(to_dict())`` gives back an equal object."""
        return {f.name: _to_json(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        """Build from a dict; unknown keys are an error that names them and lists the known ones."""
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__} expects a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"{cls.__name__} has no field {', '.join(unknown)}; known fields: {', '.join(sorted(known))}"
            )
        return cls(**data)

    def replace(self: T, **changes: Any) -> T:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]
