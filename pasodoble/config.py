"""Typed configuration: dataclasses, YAML recipes, dotted overrides, one validation pass.

Each concern owns a plain `@dataclass` (RoleConfig in `roles/config.py`, RewardConfig in `core/rewards.py`, ...),
with a default per field and an optional `validate()` that raises `ConfigError`. This module is the generic part: it turns a YAML
mapping plus `key.sub=value` overrides into such a dataclass tree, checking types strictly (a bool is `true` or
`false`, never `1` or `yes`; a float is finite; unknown keys are errors with a "did you mean" hint), then calls
every `validate()` before anything heavy loads. Recipes and override values are read as strict YAML 1.2
(`pasodoble.strict_yaml`: no duplicate keys, no aliases, at most 1 MiB). The resolved config is saved as YAML in
the run directory.

    cfg = load_config(TrainConfig, "recipes/tiny-online.yaml", ["solver.lr=1e-6", "schedule.steps=20"])
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from pasodoble.errors import ConfigError
from pasodoble.io import write_text_atomic
from pasodoble.strict_yaml import MAX_BYTES, dump_yaml, load_yaml

T = TypeVar("T")


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Recipe file (optional) + dotted overrides -> validated instance of `cls`."""
    data: dict[str, Any] = {}
    if path is not None:
        data = read_yaml(path)
    for item in overrides:
        apply_override(data, item)
    obj = from_dict(cls, data)
    validate_tree(obj)
    return obj


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), "config file not found; check the path (recipes live in recipes/)")
    if path.stat().st_size > MAX_BYTES:
        raise ConfigError(
            str(path),
            f"too large: {path.stat().st_size:,} bytes, and a recipe may hold at most {MAX_BYTES:,}",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(str(path), f"is not UTF-8 text (byte {e.start + 1}); save it as UTF-8") from None
    data = load_yaml(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), "the top level of a recipe must be a mapping of sections")
    return data


def apply_override(data: dict[str, Any], item: str) -> None:
    """Apply `a.b.c=value` (value parsed as YAML) to a nested dict in place; `a.b+=value` appends to a list
    (a list value appends each of its items), e.g. `overrides+=[proposer.temperature=1.0]` keeps a recipe's list."""
    key, sep, raw = item.partition("=")
    append = key.endswith("+")
    key = key[:-1] if append else key
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(item, "an override must look like section.field=value (e.g. solver.lr=1e-6)")
    try:
        value = load_yaml(raw, key) if raw.strip() else ""
    except ConfigError as e:
        raise ConfigError(
            key,
            f"the value {_shown(raw)} is {e.message}; quote it, and write a list "
            "inside a list as a quoted string (overrides=['oracle.tiers=[t3]'])",
        ) from None
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(key, f"'{part}' is a value, not a section; cannot set '{key}'")
        node = child
    if not append:
        node[parts[-1]] = value
        return
    current = node.setdefault(parts[-1], [])
    if not isinstance(current, list):
        raise ConfigError(
            key, f"'+=' appends to a list, but '{key}' holds {_shown(current)}; use '=' to replace it"
        )
    current.extend(value if isinstance(value, list) else [value])


def from_dict(cls: type[T], data: Any, where: str = "") -> T:
    """Build dataclass `cls` from a mapping, strictly typed; `where` is the dotted path for error messages."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(
            where or cls.__name__, f"expected a mapping of {cls.__name__} fields, got {_shown(data)}"
        )
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(str(k), list(fields), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(sorted(fields))}"
        raise ConfigError(_join(where, k), f"unknown key; {hint}")
    kwargs = {name: _coerce(hints[name], value, _join(where, name)) for name, value in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(where or cls.__name__, str(e)) from None


def _shown(value: Any, limit: int = 80) -> str:
    """repr() for an error message, cut at `limit` characters (a 1 MB value must not become a 1 MB message)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else str(key)


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:  # `X | None`: X's own error, which names the nested field
            return _coerce(options[0], value, where)
        errors = []
        for arg in options:
            try:
                return _coerce(arg, value, where)
            except ConfigError as e:
                errors.append(e.message)
        raise ConfigError(where, " or ".join(errors))
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(where, f"must be one of {', '.join(repr(a) for a in args)}, got {_shown(value)}")
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value if value is not None else {}, where)
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(where, f"expected a list, got {_shown(value)}")
        item = args[0] if args else Any
        items = [_coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple or tp is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(where, f"expected a mapping, got {_shown(value)}")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(vt, v, f"{where}.{k}") for k, v in value.items()}
    return _scalar(tp, value, where)


def _scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(where, f"expected true or false, got {_shown(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(where, f"expected an integer, got {_shown(value)}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(where, f"expected a number, got {_shown(value)}")
        try:  # a string too: a quoted "1e-6"
            number = float(value)
        except OverflowError:  # an integer past 1.8e308
            number = math.inf
        except ValueError:
            raise ConfigError(where, f"expected a number, got {_shown(value)}") from None
        if not math.isfinite(number):
            raise ConfigError(where, f"must be a finite number, got {_shown(value)}")
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(where, f"expected a string, got {_shown(value)} (quote it in YAML)")
    if tp is Path:
        if isinstance(value, (str, Path)):
            return Path(value)
        raise ConfigError(where, f"expected a path, got {_shown(value)}")
    raise ConfigError(where, f"unsupported config type {tp!r}")


def validate_tree(obj: Any, where: str = "") -> None:
    """Call `validate()` on every nested dataclass, children first, then `check_machine()` where a dataclass has
    one; prefix errors with their dotted path. `validate` checks the config itself and never imports torch, so a
    recipe's mistakes answer before torch loads; `check_machine` checks what the config asks of this machine (a CUDA
    device, an engine that runs here). A NaN or infinite float field is an error here too, for configs built in
    code rather than read."""
    _call_each(obj, where, "validate")
    _call_each(obj, where, "check_machine")


def _call_each(obj: Any, where: str, method: str) -> None:
    for f in dataclasses.fields(obj):
        child = getattr(obj, f.name)
        if isinstance(child, float) and not math.isfinite(child):
            raise ConfigError(_join(where, f.name), f"must be a finite number, got {child!r}")
        if dataclasses.is_dataclass(child) and not isinstance(child, type):
            _call_each(child, _join(where, f.name), method)
    check = getattr(obj, method, None)
    if callable(check):
        try:
            check()
        except ConfigError as e:
            raise ConfigError(_qualify(where, e.where), e.message) from None


def _qualify(where: str, field_path: str) -> str:
    """Prefix a validate() error's field with the section path, once (`lr` or `solver.lr` -> `solver.lr`)."""
    if not where or field_path == where or field_path.startswith(where + "."):
        return field_path or where
    section = where.rsplit(".", 1)
    if field_path.split(".", 1)[0] == section[-1]:  # validate() already named its own section
        return _join(section[0], field_path) if len(section) == 2 else field_path
    return _join(where, field_path)


def to_dict(obj: Any) -> Any:
    """Dataclass tree -> plain YAML-serialisable data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj


def save_config(obj: Any, path: str | Path) -> None:
    """Write the resolved config as YAML (atomically); `load_config(type(obj), path)` reads it back."""
    write_text_atomic(path, dump_yaml(to_dict(obj)))
