"""The JSON round trip of typed records: a dataclass as plain JSON values (`to_json`), and back, typed
recursively and strict about names (`decode`). Unknown or missing fields are an error (`RecordError`), never
silently dropped.

Records are strict JSON (docs/method.md, "Records"): a float that is no finite number is written as the string
"NaN", "Infinity" or "-Infinity" (`to_json`), which reads back as that float wherever the field is not typed as
text (a float field, or an untyped value such as a fit's dict: `restore_floats`); `dumps` is the one JSON writer
of records and run files, and refuses a bare NaN that got past the encoding. A field typed `Figure` is a measured
figure that a view computes and draws with (a throughput, a start-up time): it must be a finite number, and a record
that holds anything else there is refused where it is read (RecordError naming the field), once for every reader.

A record's JSON nests a few levels (a rank's figures in its metrics: 6); JSON nested past MAX_DEPTH is refused
(`parse_json`, `nesting_problem`) before any reader recurses into it.

A record also travels as one marked line of a log (`record_line`, `read_record_line`): what `bench run
--record-lines` prints and `bench import -` finds among the other lines of, say, `kubectl logs POD`."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from bench.core.inputs import RECORD_LIMIT, MiB

Where = str | tuple[Any, ...]  # where a value is in a record: a name, or (parent's where, key[, index])
Converter = Callable[[Any, Where], Any]  # convert(value, where) -> the typed value (the converters below)
R = TypeVar("R", bound="Record")


class RecordError(ValueError):
    """A stored record that this version cannot read."""


# A JSON object a record keeps as it was read (an environment, a launch's facts, an event). The type checker sees its
# keys and values; the codec, which reads field types at run time, sees a bare dict and takes the value unchecked,
# as records have always been read (dict[str, Any] there would refuse a record whose value is not an object).
if typing.TYPE_CHECKING:
    JsonObject = dict[str, typing.Any]
else:
    JsonObject = dict


# A figure a view computes and draws with must be a finite number (a throughput of Infinity means nothing, and fails a
# plot's error bars): the codec refuses anything else in a field of this type (_finite_converter).
FINITE = "finite"
Figure = Annotated[float, FINITE]

# How deep a record's JSON may nest: a record nests 6 levels (a rank's figures in its metrics), so this is far above any
# record, and far below the recursion of the readers (the JSON parser's, the decoding's) that deeper JSON would exhaust.
MAX_DEPTH = 64


def nesting_problem(value: Any) -> str | None:
    """Why `value` (plain JSON) nests too deep to be a record, or None; walked a level at a time without recursion, so
    that any depth is measured."""
    level, depth = [value], 1
    while level:
        if depth > MAX_DEPTH:
            return too_deep()
        inner = []
        for item in level:
            for v in item.values() if type(item) is dict else item if type(item) is list else ():
                if type(v) in CONTAINERS:
                    inner.append(v)
        level, depth = inner, depth + 1
    return None


CONTAINERS = frozenset({dict, list})


def too_deep() -> str:
    return f"its JSON nests more than {MAX_DEPTH} levels deep, the most a record may (a record nests 6)"


def parse_json(text: str | bytes) -> Any:
    """JSON text as plain values; RecordError where it nests deeper than MAX_DEPTH (ValueError, as json.loads, where
    it is no JSON)."""
    try:
        value = json.loads(text)
    except RecursionError:  # the parser's own bound, which is Python's recursion limit
        raise RecordError(too_deep()) from None
    problem = nesting_problem(value)
    if problem:
        raise RecordError(problem)
    return value


# how a float that is not a finite number is written (the words JavaScript and Python's json module use for them)
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def json_float(value: float) -> float | str:
    """A float as a record holds it: itself, or the word for a non-finite one."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def float_of(value: Any) -> Any:
    """A float read from a record or a run file: a number, or the word written for a non-finite one (NON_FINITE).
    For values whose field is not typed float (a rank's output, a journal line), which decoding leaves as read."""
    return NON_FINITE[value] if isinstance(value, str) and value in NON_FINITE else value


def restore_floats(value: Any) -> Any:
    """Plain JSON with the words for non-finite floats turned back into floats, at any depth: what a value whose
    field is not typed (a fit's dict, a rank's output) reads back as, so that a number written stays a number."""
    kind = type(value)  # JSON's own types first, by identity (a record holds hundreds of values), then subclasses
    if kind in NUMBERS:
        return value
    if kind is dict:
        return {k: v if type(v) in NUMBERS else restore_floats(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in NUMBERS else restore_floats(v) for v in value]
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, list):
        return [restore_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: restore_floats(v) for k, v in value.items()}
    return value


NUMBERS = frozenset({int, float, bool, type(None)})  # JSON values that are neither a container nor a word: kept


def dumps(value: Any, **options: Any) -> str:
    """`value` as strict JSON: non-finite floats as their words (to_json); anything still not JSON is an error
    here, when written, not in a reader that refuses the file later."""
    return json.dumps(to_json(value), allow_nan=False, **options)


class OwnForm(ABC):
    """Base of a dataclass that writes and reads its own JSON form (bench.core.spec.TaskSettings): `to_dict()` gives
    it, and the class's `from_json(value, where)` reads it, where a field is typed as the class."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    @abstractmethod
    def from_json(cls, value: Any, where: Where) -> Any: ...


def to_json(obj: Any) -> Any:
    """A dataclass (or container of them) as plain JSON values, non-finite floats as their words (json_float)."""
    if isinstance(obj, float):
        return json_float(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if isinstance(obj, OwnForm):
            return to_json(obj.to_dict())
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    if isinstance(obj, enum.Enum):
        return obj.value
    return obj


def hints_of(cls: Any) -> dict[str, Any]:
    hints = getattr(cls, "__bench_hints__", None)
    if hints is None or hints[0] is not cls:
        hints = (cls, typing.get_type_hints(cls, include_extras=True))  # Figure's mark kept
        cls.__bench_hints__ = hints
    found: dict[str, Any] = hints[1]
    return found


# JSON values a plain field accepts (a float field takes an integer: JSON writes 2.0 as 2 in some tools)
PLAIN = {str: (str,), int: (int,), float: (int, float), bool: (bool,)}


def from_json(tp: Any, value: Any, where: Where = "record") -> Any:
    """`value` (plain JSON) as type `tp`: dataclasses, X | None, list[X], dict[str, X], plain values."""
    return converter(tp)(value, where)


def decode(cls: Any, data: Any, where: Where | None = None) -> Any:
    """An instance of dataclass `cls` from a dict of its fields (typed recursively); strict about names."""
    return converter(cls)(data, where or cls.__name__)


_FIELDS_CONVERTERS: dict[type, Converter] = {}


def decode_fields(cls: Any, data: Any, where: Where) -> Any:
    """decode's reading of a dict of fields, for an OwnForm class's from_json (which decode itself would call)."""
    conv = _FIELDS_CONVERTERS.get(cls) or _FIELDS_CONVERTERS.setdefault(cls, _dataclass_converter(cls))
    return conv(data, where)


# ---------------------------------------------------------------- converters, one per type, made once
# A converter is convert(value, where) -> the typed value, or RecordError naming where the value is. Records are
# read by the thousand (a store, a report), so each type's checks are worked out once, not per value, and `where`
# is spelled only for an error: below the top it is (the parent's where, a field name or key), or (the parent's
# where, a list index, LIST_ITEM).
_CONVERTERS: dict[Any, Converter] = {}
LIST_ITEM = "[]"


def converter(tp: Any) -> Converter:
    """The converter of type `tp` (from_json's rules), made on first use."""
    try:
        return _CONVERTERS[tp]
    except KeyError:
        conv = _CONVERTERS[tp] = _make_converter(tp)
        return conv


def spell(where: Where) -> str:
    """A where as the message says it: "record r1.rank_map[0].host"."""
    parts: list[str] = []
    while isinstance(where, tuple):
        where, key, *index = where  # (parent, field name) or (parent, list index, LIST_ITEM)
        parts.append(f"[{key}]" if index else f".{key}")
    return where + "".join(reversed(parts))


def _make_converter(tp: Any) -> Converter:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        return _finite_converter(args[0]) if FINITE in tp.__metadata__ else converter(args[0])
    if tp is typing.Any or tp is object:
        return lambda value, where: restore_floats(value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_converter(tp)
    if isinstance(tp, type) and issubclass(tp, OwnForm):
        return tp.from_json
    if tp in PLAIN:
        return _plain_converter(tp)
    if origin in (typing.Union, types.UnionType):
        return _union_converter(args)
    if dataclasses.is_dataclass(tp):
        return _dataclass_converter(tp)
    if origin in (list, tuple):
        return _list_converter(args[0] if args else typing.Any)
    if origin is dict:
        return _dict_converter(args[1] if args else typing.Any)
    return lambda value, where: restore_floats(value)  # an untyped container (a bare dict or list)


def _enum_converter(tp: type[enum.Enum]) -> Converter:
    def convert(value: Any, where: Where) -> Any:
        try:
            return tp(value)
        except ValueError:
            raise RecordError(
                f"{spell(where)}: {value!r} is not one of {', '.join(repr(m.value) for m in tp)}"
            ) from None

    return convert


def _plain_converter(tp: type) -> Converter:
    accepted = PLAIN[tp]
    exact = frozenset(accepted)  # JSON's own types: a bool's type is bool, so it is never taken for an int here

    def convert(value: Any, where: Where) -> Any:
        if type(value) in exact:
            return value
        if tp is float and isinstance(value, str) and value in NON_FINITE:
            return NON_FINITE[value]
        if not isinstance(value, accepted) or (isinstance(value, bool) and tp is not bool):
            raise RecordError(f"{spell(where)}: expected {tp.__name__}, found {type(value).__name__}")
        return value

    return convert


def finite(value: Any) -> bool:
    """Whether a number read from JSON is a finite float (an integer too large for a float is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _finite_converter(tp: Any) -> Converter:
    inner = converter(tp)

    def convert(value: Any, where: Where) -> Any:
        value = inner(value, where)
        if not finite(value):
            shown = json_float(value) if isinstance(value, float) else f"an integer of {len(str(value))} digits"
            raise RecordError(f"{spell(where)}: {shown} is not a finite number, which a measured figure must be")
        return value

    return convert


def _union_converter(args: tuple[Any, ...]) -> Converter:
    optional = type(None) in args
    rest = [a for a in args if a is not type(None)]
    if len(rest) == 1:
        inner = converter(rest[0])

        def convert(value: Any, where: Where) -> Any:
            if value is None and optional:
                return None
            return inner(value, where)

        return convert
    numeric = float in rest

    def convert_plain(value: Any, where: Where) -> Any:  # a plain union of JSON types (int | float, ...)
        if value is None and optional:
            return None
        return float_of(value) if numeric else value

    return convert_plain


def _dataclass_converter(cls: Any) -> Converter:
    # (field names, required names, converter of each field), worked out on first use: the field types may name
    # classes defined after this one
    plan: list[Any] = []

    def convert(data: Any, where: Where) -> Any:
        if not plan:
            hints = hints_of(cls)
            fields = [f for f in dataclasses.fields(cls) if f.init]
            plan[:] = [
                frozenset(f.name for f in fields),
                frozenset(
                    f.name
                    for f in fields
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                ),
                {f.name: converter(hints[f.name]) for f in fields},
            ]
        names, required, fields = plan
        if not isinstance(data, dict):
            raise RecordError(f"{spell(where)}: expected an object, found {type(data).__name__}")
        keys = data.keys()
        if not keys <= names:
            raise RecordError(f"{spell(where)}: unknown field(s) {', '.join(sorted(set(data) - names))}")
        if not required <= keys:
            raise RecordError(f"{spell(where)}: missing field(s) {', '.join(sorted(required - set(data)))}")
        return cls(**{k: fields[k](v, (where, k)) for k, v in data.items()})

    return convert


def _list_converter(item_type: Any) -> Converter:
    item = converter(item_type)
    figures = item_type == Figure
    exact = frozenset(PLAIN.get(float if figures else item_type, ()))  # a list of plain values that need no conversion
    # is copied as it is (a list of figures once each is known finite)

    def convert(value: Any, where: Where) -> Any:
        if not isinstance(value, list):
            raise RecordError(f"{spell(where)}: expected a list, found {type(value).__name__}")
        if exact and all(type(v) in exact for v in value) and (not figures or all(map(finite, value))):
            return list(value)
        return [item(v, (where, i, LIST_ITEM)) for i, v in enumerate(value)]

    return convert


def _dict_converter(value_type: Any) -> Converter:
    item = converter(value_type)

    def convert(value: Any, where: Where) -> Any:
        if not isinstance(value, dict):
            raise RecordError(f"{spell(where)}: expected an object, found {type(value).__name__}")
        return {k: item(v, (where, k)) for k, v in value.items()}

    return convert


class Record:
    """Mixin: the JSON round trip for a record dataclass."""

    def to_dict(self) -> dict[str, Any]:
        as_json: dict[str, Any] = to_json(self)
        return as_json

    @classmethod
    def from_dict(cls: type[R], data: Any) -> R:
        record: R = decode(cls, data)
        return record


# ---------------------------------------------------------------- a record as one marked line of a log
RECORD_LINE_MARK = "bench-record"
DIGEST_CHARS = 16  # of the line's SHA-256: enough to tell a cut or changed line, short beside a record


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def record_line(data: dict[str, Any]) -> str:
    """A record's JSON on one line, `bench-record sha256=DIGEST {...}`: marked, so that a reader finds it among a
    log's other lines (a prefix before the mark, as `kubectl logs --timestamps` adds, is allowed), and with the digest
    of its JSON, so that a line cut or changed on its way is known as such."""
    text = dumps(data, separators=(",", ":"))
    return f"{RECORD_LINE_MARK} sha256={_digest(text)} {text}"


def read_record_line(line: str) -> Any:
    """The JSON a marked line holds, None for a line without the mark; RecordError for a marked line whose JSON is
    not the one its digest was made from (cut, or changed), is larger than a record file may be (RECORD_LIMIT), or
    nests deeper than a record may (MAX_DEPTH)."""
    at = line.find(RECORD_LINE_MARK + " sha256=")
    if at < 0:
        return None
    digest, _, text = line[at + len(RECORD_LINE_MARK) + len(" sha256=") :].rstrip("\r\n").partition(" ")
    if len(text) > RECORD_LIMIT:
        raise RecordError(
            f"its record is {len(text):,} characters, more than a record may be ({RECORD_LIMIT // MiB} MiB)"
        )
    if _digest(text) != digest:
        raise RecordError(
            f"its record is not the one its digest was made from ({len(text)} characters: cut or changed)"
        )
    try:
        return parse_json(text)  # as a record.json is read: RunRecord.from_dict reads the words for non-finite floats
    except RecordError:
        raise
    except ValueError as exc:  # the digest matched: the line was written so
        raise RecordError(f"its record is not JSON ({exc})") from None
