"""`pasodoble config show` / `config keys`: every config key with its value, default and one-line comment.

Why: a recipe spells out only what it changes; a user needs to see every key that exists, what it is set to and
what it means, without reading nine dataclasses. The comments are not written twice: each field's documentation is
the `# ...` comment beside it in the dataclass source (STYLE.md: one line of comment per field), read here with
`inspect.getsource` + `ast` (which statement is which field) + `tokenize` (which comments fall inside it).

    pasodoble config show recipes/tiny-online.yaml schedule.steps=20   # the resolved config, commented YAML
    pasodoble config show --kind experiment                            # every default of an experiment file
    pasodoble config keys                                              # flat: key, default, comment

`show` prints YAML that `pasodoble train --config` reads back unchanged. The kind of a recipe (train, experiment,
demo) is guessed from its top-level keys unless `--kind` names it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import io
import textwrap
import tokenize
import typing
from pathlib import Path
from typing import Any

import yaml

from pasodoble.config import load_config, read_yaml, to_dict
from pasodoble.errors import UserError
from pasodoble.runs.demo_config import DemoConfig
from pasodoble.runs.experiment import ExperimentConfig
from pasodoble.runs.train_config import TrainConfig


def config_kinds() -> dict[str, type]:
    """Recipe kinds and their top-level dataclass (none of them imports torch)."""

    return {"train": TrainConfig, "experiment": ExperimentConfig, "demo": DemoConfig}


@functools.cache
def field_comments(cls: type) -> dict[str, str]:
    """Field name -> its comment: the `# ...` inside the field's statement, else the comment lines just above it."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # built at run time, or no source shipped
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    body = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)).body
    out: dict[str, str] = {}
    previous_end = 0
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            lines = range(node.lineno, node.end_lineno + 1)
            if not any(n in comments for n in lines):  # a block of comment lines right above the field
                above = []
                for n in range(node.lineno - 1, previous_end, -1):
                    if n not in comments:
                        break
                    above.insert(0, n)
                lines = above
            text = " ".join(comments[n] for n in lines if n in comments)
            if text:
                out[node.target.id] = text
        previous_end = node.end_lineno
    return out


def _nested_dataclass(tp: Any) -> type | None:
    """The dataclass type behind a field annotation (`EvalConfig | None` -> EvalConfig), if any."""
    if dataclasses.is_dataclass(tp):
        return tp
    for arg in typing.get_args(tp):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def _scalar_yaml(value: Any) -> str:
    """One value as single-line YAML (flow style for lists and mappings, newlines as `\\n` escapes)."""
    style = '"' if isinstance(value, str) and "\n" in value else None
    text = yaml.safe_dump(
        value, default_flow_style=True, default_style=style, width=10**9, allow_unicode=True
    ).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def commented_yaml(obj: Any, indent: int = 0) -> list[str]:
    """YAML lines of a dataclass tree, each field followed by its source comment."""
    cls = type(obj)
    comments = field_comments(cls)
    hints = typing.get_type_hints(cls)
    pad = "  " * indent
    lines = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        note = f"  # {comments[f.name]}" if f.name in comments else ""
        if dataclasses.is_dataclass(value):
            lines.append(f"{pad}{f.name}:{note}")
            lines += commented_yaml(value, indent + 1)
        elif value is None and _nested_dataclass(hints.get(f.name)) is not None:
            lines.append(f"{pad}{f.name}: null{note}")
        else:
            lines.append(f"{pad}{f.name}: {_scalar_yaml(to_dict(value))}{note}")
    return lines


def flat_keys(obj: Any, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, value as YAML, comment) for every leaf of a config (a class: its defaults); a section that
    is off by default (`eval: null`) is listed, then the keys it takes when set."""
    obj = obj() if isinstance(obj, type) else obj
    hints = typing.get_type_hints(type(obj))
    comments = field_comments(type(obj))
    rows = []
    for f in dataclasses.fields(obj):
        key, value, note = f"{prefix}{f.name}", getattr(obj, f.name), comments.get(f.name, "")
        nested = _nested_dataclass(hints.get(f.name))
        if dataclasses.is_dataclass(value):
            rows += flat_keys(value, key + ".")
        elif value is None and nested is not None:
            rows.append((key, "null", note))
            rows += flat_keys(nested, key + ".")
        else:
            rows.append((key, _scalar_yaml(to_dict(value)), note))
    return rows


def guess_kind(path: Path | None) -> str:
    """The recipe kind whose top-level fields hold every top-level key of the file (train when none)."""
    if path is None:
        return "train"
    keys = set(read_yaml(path))
    for kind, cls in config_kinds().items():
        if keys <= {f.name for f in dataclasses.fields(cls)}:
            return kind
    raise UserError(
        f"{path}: its top-level keys fit no recipe kind; pass --kind train, experiment or demo "
        "(unknown keys are then named)"
    )


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "config",
        help="print a recipe's resolved config with every key's default and comment",
    )
    sub = p.add_subparsers(dest="config_command", metavar="<show|keys>")
    show = sub.add_parser(
        "show",
        help="the resolved config as commented YAML (readable back by --config)",
    )
    show.add_argument("recipe", nargs="?", type=Path, help="YAML recipe (none: the built-in defaults)")
    show.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, as for train")
    show.add_argument(
        "--kind", choices=("train", "experiment", "demo"), help="recipe kind (default: guessed)"
    )
    show.set_defaults(func=run_show)
    keys = sub.add_parser(
        "keys",
        help="every key of a recipe kind: dotted name, default, comment",
    )
    keys.add_argument("--kind", choices=("train", "experiment", "demo"), default="train", help="recipe kind")
    keys.set_defaults(func=run_keys)
    p.set_defaults(func=lambda args: _usage(p))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_show(args: argparse.Namespace) -> int:
    recipe = args.recipe
    if recipe is not None and "=" in str(recipe) and not recipe.is_file():  # only overrides were given
        args.overrides, recipe = [str(recipe), *args.overrides], None
    kind = args.kind or guess_kind(recipe)
    cfg = load_config(config_kinds()[kind], recipe, args.overrides)
    source = f"{recipe}" if recipe else "built-in defaults"
    extra = f" + {' '.join(args.overrides)}" if args.overrides else ""
    print(f"# pasodoble {kind} config: {source}{extra}")
    print("\n".join(commented_yaml(cfg)))
    return 0


def run_keys(args: argparse.Namespace) -> int:
    rows = flat_keys(config_kinds()[args.kind])
    width = max(len(k) for k, *_ in rows)
    for key, default, comment in rows:
        print(f"{key:<{width}}  {default}" + (f"  # {comment}" if comment else ""))
    return 0
