"""One declaration per option, on its dataclass field; everything else is generated from it.

``option(...)`` puts the flag, help text and allowed values on a field. From those declarations this module
derives the argparse arguments, the validation (``Literal`` types give the choices, bounds give the range),
the manifest record (flag -> value) and the exact command line that recreates a set of options.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Union

T = TypeVar("T")


@dataclass(frozen=True)
class Declaration:
    flag: str
    help: str
    negate: bool = False  # a boolean whose flag turns it off (--no-...)
    nargs: int | str | None = None
    metavar: str | tuple[str, ...] | None = None
    low: float | None = None  # inclusive bounds
    high: float | None = None
    above: float | None = None  # exclusive bounds
    below: float | None = None
    group: str = "build"


def option(default: Any, flag: str, help: str, **declaration: Any) -> Any:
    """A dataclass field declared as a command-line option."""
    return dataclasses.field(default=default, metadata={"option": Declaration(flag, help, **declaration)})


@dataclass(frozen=True)
class Declared:
    """One declared option of an options class, found through its nested option groups."""

    path: tuple[str, ...]  # attribute path from the root options class
    declaration: Declaration
    kind: Any  # the field's type
    default: Any

    @property
    def dest(self) -> str:
        return "option__" + "__".join(self.path)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def declared(cls: type, prefix: tuple[str, ...] = ()) -> Iterator[Declared]:
    """Every declared option of ``cls``, nested option groups (dataclass-typed fields) included."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if "option" in f.metadata:
            default = f.default if f.default is not dataclasses.MISSING else None
            yield Declared((*prefix, f.name), f.metadata["option"], kind, default)
        elif isinstance(kind, type) and dataclasses.is_dataclass(kind):
            yield from declared(kind, (*prefix, f.name))


def _optional(kind: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if typing.get_origin(kind) in (Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return (args[0] if len(args) == 1 else kind), len(args) < len(typing.get_args(kind))
    return kind, False


def _element(kind: Any) -> Any:
    """The scalar type of a field: ``tuple[int, ...]`` -> int, ``Literal[...]`` stays."""
    kind, _ = _optional(kind)
    if typing.get_origin(kind) is tuple:
        return typing.get_args(kind)[0]
    return kind


def choices(kind: Any) -> tuple[Any, ...] | None:
    element = _element(kind)
    return typing.get_args(element) if typing.get_origin(element) is typing.Literal else None


def _scalar_type(kind: Any) -> type:
    element = _element(kind)
    literal = choices(kind)
    return type(literal[0]) if literal else element


def _check_scalar(value: Any, kind: Any, d: Declaration) -> str | None:
    """Why ``value`` is not allowed, or None."""
    allowed = choices(kind)
    if allowed is not None:
        return None if value in allowed else f"unknown {d.flag} {value!r}; choose one of {', '.join(map(str, allowed))}"
    expected = _scalar_type(kind)
    numeric = expected in (int, float) and isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int and (not numeric or isinstance(value, float)):
        return f"{d.flag} must be an integer, got {value!r}"
    if expected is float and not numeric:
        return f"{d.flag} must be a number, got {value!r}"
    if expected in (str, Path) and not isinstance(value, (str, Path)):
        return f"{d.flag} must be text, got {value!r}"
    if expected is bool and not isinstance(value, bool):
        return f"{d.flag} must be true or false, got {value!r}"
    if numeric:
        return _check_range(value, d)
    return None


def _check_range(value: float, d: Declaration) -> str | None:
    ok = ((d.low is None or value >= d.low) and (d.high is None or value <= d.high)
          and (d.above is None or value > d.above) and (d.below is None or value < d.below))
    if ok:  # NaN fails every comparison, so it never gets here
        return None
    if d.low is not None and d.high is not None:
        return f"{d.flag} must be between {_bound(d.low)} and {_bound(d.high)}, got {value}"
    lower = f"[{_bound(d.low)}" if d.low is not None else f"({_bound(d.above)}" if d.above is not None else "(-inf"
    upper = f"{_bound(d.high)}]" if d.high is not None else f"{_bound(d.below)})" if d.below is not None else "inf)"
    return f"{d.flag} must be in {lower}, {upper}, got {value}"


def _bound(value: float | None) -> str:
    """A bound as a user wrote it: 268435456, not 2.68435e+08."""
    return str(int(value)) if value is not None and float(value).is_integer() else f"{value:g}"


def check_declared(instance: Any, error: type[Exception]) -> None:
    """Validate the declared fields of one options object (not its nested groups: they check themselves)."""
    hints = _hints(type(instance))
    for f in dataclasses.fields(instance):
        if "option" not in f.metadata:
            continue
        d: Declaration = f.metadata["option"]
        value = getattr(instance, f.name)
        kind, nullable = _optional(hints[f.name])
        if value is None:
            if not nullable:
                raise error(f"{d.flag} must be given")
            continue
        values = value if typing.get_origin(kind) is tuple else (value,)
        if typing.get_origin(kind) is tuple:
            if not isinstance(value, tuple):
                raise error(f"{d.flag} takes a list of values, got {value!r}")
            if isinstance(d.nargs, int) and len(value) != d.nargs:
                raise error(f"{d.flag} takes {d.nargs} values, got {len(value)}")
        for item in values:
            problem = _check_scalar(item, kind, d)
            if problem:
                raise error(problem)


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One argparse argument per declared option, in argument groups by ``Declaration.group``."""
    groups: dict[str, Any] = {"build": parser}
    titles = {"precision": "precision (FP16/INT8) and the accuracy gate",
              "tensorrt": "TensorRT plan (--target tensorrt, on the serving GPU)"}
    for item in declared(cls):
        d = item.declaration
        target = groups.get(d.group) or groups.setdefault(d.group, parser.add_argument_group(titles.get(d.group)))
        kwargs: dict[str, Any] = {"dest": item.dest, "help": d.help}
        if _scalar_type(item.kind) is bool:
            kwargs["action"] = "store_false" if d.negate else "store_true"
        else:
            kwargs.update(type=_scalar_type(item.kind), default=item.default)
            if d.nargs is not None:
                kwargs["nargs"] = d.nargs
            if (allowed := choices(item.kind)) is not None:
                kwargs["choices"] = allowed
            else:
                kwargs["metavar"] = d.metavar or d.flag.lstrip("-").upper().replace("-", "_")
        target.add_argument(d.flag, **kwargs)


def from_args(cls: type[T], args: argparse.Namespace, prefix: tuple[str, ...] = ()) -> T:
    """Rebuild the options object from parsed arguments (validation runs in the constructors)."""
    values: dict[str, Any] = {}
    hints = _hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        path = (*prefix, f.name)
        if "option" in f.metadata:
            value = getattr(args, "option__" + "__".join(path))
            values[f.name] = tuple(value) if isinstance(value, list) else value
        elif isinstance(hints[f.name], type) and dataclasses.is_dataclass(hints[f.name]):
            values[f.name] = from_args(hints[f.name], args, path)
    return cls(**values)


def _get(instance: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        instance = getattr(instance, name)
    return instance


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def to_record(instance: Any) -> dict[str, Any]:
    """Dotted field path -> value of every declared option: what the manifest records."""
    return {".".join(item.path): _jsonable(_get(instance, item.path)) for item in declared(type(instance))}


def from_record(cls: type[T], record: Mapping[str, Any], error: type[Exception]) -> T:
    """The inverse of ``to_record``; unknown flags are errors, missing ones take their defaults."""
    items = {".".join(item.path): item for item in declared(cls)}
    unknown = sorted(set(record) - set(items))
    if unknown:
        raise error(f"unknown option(s) in the record: {', '.join(unknown)}")
    argv: list[str] = []
    for path, value in record.items():
        argv += _flag_words(items[path], value if not isinstance(value, list) else tuple(value))
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser, cls)
    return from_args(cls, parser.parse_args(argv))


def _flag_words(item: Declared, value: Any) -> list[str]:
    d = item.declaration
    if isinstance(value, bool):
        return [d.flag] if value == (not d.negate) else []  # the flag sets what it is named after
    if value is None:
        return []
    if isinstance(value, tuple):
        return [d.flag, *map(_word, value)]
    return [d.flag, _word(value)]


def _word(value: Any) -> str:
    """A value as a user would type it: 250, not 250.0."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def to_flags(instance: Any, always: Collection[str] = ()) -> list[str]:
    """The command-line words that recreate ``instance`` from the defaults: non-default options, plus the
    dotted option paths in ``always`` even at their defaults (a deployment spells out what it decided)."""
    unknown = set(always) - {".".join(item.path) for item in declared(type(instance))}
    if unknown:
        raise ValueError(f"not declared options of {type(instance).__name__}: {', '.join(sorted(unknown))}")
    words: list[str] = []
    for item in declared(type(instance)):
        value = _get(instance, item.path)
        if value != item.default or ".".join(item.path) in always:
            words += _flag_words(item, value)
    return words


def from_argv(cls: type[T], argv: Sequence[str], error: type[Exception]) -> T:
    """Parse option flags (and only those) into ``cls``: how a command line written elsewhere is read back."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_arguments(parser, cls)
    try:
        args, extra = parser.parse_known_args(list(argv))
    except argparse.ArgumentError as exc:
        raise error(str(exc)) from exc
    if extra:
        raise error(f"not build options: {' '.join(extra)}")
    return from_args(cls, args)
