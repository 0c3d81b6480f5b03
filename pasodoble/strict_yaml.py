"""The YAML dialect of recipes and overrides: YAML 1.2's core schema, no duplicate keys, no aliases, bounded size.

What: `load_yaml(text, where)` reads a recipe (or one override value) into plain data; `dump_yaml(data)` writes
data that `load_yaml` reads back unchanged. Everything else in `pasodoble.config` works on that data.

Why: PyYAML speaks YAML 1.1, where `yes`, `no`, `on` and `off` are booleans (so `logging.quiet=yes` passed a
"strict boolean" check), `1e-6` is a string, `2026-12-01` is a date and `1:20` is the integer 80. A repeated key
silently kept the last value, and aliases let a 1 KB file expand into gigabytes (ten nested levels of ten aliases
each exhausted 3 GB of memory) before any check ran.

How: a `SafeLoader` subclass whose implicit types are those of the YAML 1.2 core schema (booleans are only
true/false in three spellings, null is `~`/null/empty, integers are decimal, `0o` octal or `0x` hex, floats as
`1e-6`, `.inf`, `.nan`), whose mappings refuse a repeated key (naming it and both lines), whose composer refuses
anchors and aliases and nesting past `MAX_DEPTH`, and a size cap checked before parsing. A YAML 1.2 file without
aliases reads the same here as in any 1.2 reader. `dump_yaml` quotes every string that a 1.1 or a 1.2 reader would
take for another type, so a saved config reads back the same in either.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.scanner import ScannerError

from pasodoble.errors import ConfigError

MAX_BYTES = 1 << 20  # 1 MiB: the largest recipe is a few KB, so anything bigger is a mistake or an attack
MAX_DEPTH = 32  # nesting levels; recipes use three

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_CORE = (  # (tag, pattern, first characters), in resolution order: an integer before a float
    ("tag:yaml.org,2002:bool", _BOOL, list("tTfF")),
    ("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", _INT, list("-+0123456789")),
    ("tag:yaml.org,2002:float", _FLOAT, list("-+.0123456789")),
)


class StrictLoader(yaml.SafeLoader):
    """SafeLoader with the YAML 1.2 core schema, unique keys, and no anchors or aliases (see module docstring)."""

    yaml_implicit_resolvers: dict = {}

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # The scanner's bookkeeping costs O(depth) per bracket, so 10^6 `[` took minutes before the composer's
        # depth check could run: stop at the bracket itself.
        if self.flow_level >= MAX_DEPTH:
            raise ScannerError(None, None, f"nested deeper than {MAX_DEPTH} levels", self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            kind = "an alias (*" if isinstance(event, yaml.AliasEvent) else "an anchor (&"
            raise ComposerError(
                None,
                None,
                f"{kind}{event.anchor}) is not allowed in a recipe; write the value out",
                event.start_mark,
            )
        if self._depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: the base class reports it
                if first is not None:
                    raise ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {first})", key_node.start_mark
                    )
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_bool(self, node: Any) -> bool:
        value = self.construct_scalar(node)
        if not _BOOL.match(value):  # `!!bool yes` is YAML 1.1
            raise ConstructorError(
                None, None, f"{value!r} is not a boolean; write true or false", node.start_mark
            )
        return value.lower() == "true"

    def construct_yaml_int(self, node: Any) -> int:
        value = self.construct_scalar(node)
        if not _INT.match(value):
            raise ConstructorError(None, None, f"{value!r} is not an integer", node.start_mark)
        if len(value) > 100:  # also keeps Python's 4,300-digit conversion limit from raising a ValueError
            raise ConstructorError(
                None, None, f"an integer of {len(value)} digits is too large", node.start_mark
            )
        if value.startswith(("0o", "0x")):
            return int(value[2:], 8 if value[1] == "o" else 16)
        return int(value, 10)

    def construct_yaml_float(self, node: Any) -> float:
        value = self.construct_scalar(node)
        text = value.lower().lstrip("+")
        if text in (".inf", "-.inf", ".nan"):
            return {".inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}[text]
        return float(value)


for _tag, _pattern, _first in _CORE:
    StrictLoader.add_implicit_resolver(_tag, _pattern, _first)
StrictLoader.add_constructor("tag:yaml.org,2002:bool", StrictLoader.construct_yaml_bool)
StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)


def _refuse(loader: StrictLoader, node: Any) -> None:
    raise ConstructorError(None, None, f"the type {node.tag} is not allowed in a recipe", node.start_mark)


for _tag in ("timestamp", "binary", "omap", "pairs", "set", "merge", "value"):  # YAML 1.1 only
    StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse)


class StrictDumper(yaml.SafeDumper):
    """SafeDumper that also quotes strings the 1.2 core schema would read as another type (`"1e-6"`)."""


for _tag, _pattern, _first in _CORE:
    StrictDumper.add_implicit_resolver(_tag, _pattern, _first)


def load_yaml(text: str, where: str) -> Any:
    """Parse recipe text; a `ConfigError` naming `where` and the line for anything this dialect refuses."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_BYTES:
        raise ConfigError(where, f"too large: {size:,} bytes, and a recipe may hold at most {MAX_BYTES:,}")
    try:
        return yaml.load(text, Loader=StrictLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f"{where}:{mark.line + 1}" if mark is not None else where
        raise ConfigError(line, f"not valid YAML ({getattr(err, 'problem', None) or err})") from None


def dump_yaml(data: Any) -> str:
    """YAML text of plain data that `load_yaml` (and a YAML 1.1 reader) reads back unchanged."""
    return yaml.dump(data, Dumper=StrictDumper, sort_keys=False, allow_unicode=True)
