"""The JSON round trip of typed records: a dataclass as plain JSON values (`to_json`), and back, typed
recursively and strict about names (`decode`). Unknown or missing fields are an error (`RecordError`), never
silently dropped.

Records are strict JSON (docs/method.md, "Records"): a float that is no finite number is written as the string
"NaN", "Infinity" or "-Infinity" (`to_json`), which reads back as that float wherever the field is not typed as
text (a float field, or an untyped value such as a fit's dict: `restore_floats`); `dumps` is the one JSON writer
of records and run files, and refuses a bare NaN that got past the encoding."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing


class RecordError(ValueError):
    """A stored record that this version cannot read."""


# how a float that is not a finite number is written (the words JavaScript and Python's json module use for them)
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def json_float(value: float):
    """A float as a record holds it: itself, or the word for a non-finite one."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def float_of(value):
    """A float read from a record or a run file: a number, or the word written for a non-finite one (NON_FINITE).
    For values whose field is not typed float (a rank's output, a journal line), which decoding leaves as read."""
    return NON_FINITE[value] if isinstance(value, str) and value in NON_FINITE else value


def restore_floats(value):
    """Plain JSON with the words for non-finite floats turned back into floats, at any depth: what a value whose
    field is not typed (a fit's dict, a rank's output) reads back as, so that a number written stays a number."""
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, list):
        return [restore_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: restore_floats(v) for k, v in value.items()}
    return value


def dumps(value, **options) -> str:
    """`value` as strict JSON: non-finite floats as their words (to_json); anything still not JSON is an error
    here, when written, not in a reader that refuses the file later."""
    return json.dumps(to_json(value), allow_nan=False, **options)


def to_json(obj):
    """A dataclass (or container of them) as plain JSON values, non-finite floats as their words (json_float)."""
    if isinstance(obj, float):
        return json_float(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    if isinstance(obj, enum.Enum):
        return obj.value
    return obj


def hints_of(cls) -> dict:
    hints = getattr(cls, "__bench_hints__", None)
    if hints is None or hints[0] is not cls:
        hints = (cls, typing.get_type_hints(cls))
        cls.__bench_hints__ = hints
    return hints[1]


# JSON values a plain field accepts (a float field takes an integer: JSON writes 2.0 as 2 in some tools)
PLAIN = {str: (str,), int: (int,), float: (int, float), bool: (bool,)}


def from_json(tp, value, where: str = "record"):
    """`value` (plain JSON) as type `tp`: dataclasses, X | None, list[X], dict[str, X], plain values."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is typing.Any or tp is object:
        return restore_floats(value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise RecordError(f"{where}: {value!r} is not one of {', '.join(repr(m.value) for m in tp)}") from None
    if tp is float and isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    if tp in PLAIN:
        if not isinstance(value, PLAIN[tp]) or (isinstance(value, bool) and tp is not bool):
            raise RecordError(f"{where}: expected {tp.__name__}, found {type(value).__name__}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return from_json(rest[0], value, where)
        return float_of(value) if float in rest else value  # a plain union of JSON types (int | float, ...)
    if dataclasses.is_dataclass(tp):
        return decode(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, found {type(value).__name__}")
        return [from_json(args[0] if args else typing.Any, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object, found {type(value).__name__}")
        return {k: from_json(args[1] if args else typing.Any, v, f"{where}.{k}") for k, v in value.items()}
    return restore_floats(value)  # an untyped container (a bare dict or list)


def decode(cls, data: dict, where: str | None = None):
    """An instance of dataclass `cls` from a dict of its fields (typed recursively); strict about names."""
    where = where or cls.__name__
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object, found {type(data).__name__}")
    hints = hints_of(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = set(data) - names
    if unknown:
        raise RecordError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    required = {f.name for f in dataclasses.fields(cls)
                if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = required - set(data)
    if missing:
        raise RecordError(f"{where}: missing field(s) {', '.join(sorted(missing))}")
    return cls(**{k: from_json(hints[k], v, f"{where}.{k}") for k, v in data.items()})


class Record:
    """Mixin: the JSON round trip for a record dataclass."""

    def to_dict(self) -> dict:
        return to_json(self)

    @classmethod
    def from_dict(cls, data: dict):
        return decode(cls, data)
