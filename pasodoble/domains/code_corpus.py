"""A code corpus: function-sized passages of Python source files, by default the running interpreter's stdlib.

    sampler = FunctionPassages(source_root("stdlib"), seed=0)
    sampler.sample(step=3, k=2)          # two Passage(id="json/decoder.py:py_scanstring", text=<its source>)

What: every `.py` file under the root (test folders, site-packages and caches left out) is a record; a draw picks a
file, parses it with `ast` (never runs it) and picks one top-level function or method, decorators included,
dedented. Files that cannot be read or parsed, files without functions, and functions shorter than `min_chars` or
longer than `max_chars` are skipped and counted (`skips`), like the math corpus's short records.

Why the standard library: it is on every machine that runs the trainer, so a code run needs no download; its
passages change with the Python version (docs/DOMAINS.md). Draws are a pure function of (seed, step), and files are
parsed only when drawn (a small cache keeps the recent ones), so opening the corpus costs one directory walk.
"""

from __future__ import annotations

import ast
import os
import random
import sysconfig
import textwrap
from collections import Counter, OrderedDict
from pathlib import Path

from pasodoble.core.knowledge import Passage
from pasodoble.errors import ConfigError, UserError

STDLIB = "stdlib"  # knowledge.path value: the standard library of the interpreter running the trainer
SKIPPED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "__pycache__", "idle_test"})
MAX_FILE_BYTES = 256_000  # larger files (generated tables) are skipped rather than parsed
MAX_DRAWS = 1000
_CACHE_FILES = 64


def source_root(path: str) -> Path:
    """`stdlib` -> the running interpreter's standard library folder; anything else -> that path."""
    return Path(sysconfig.get_paths()["stdlib"]) if path == STDLIB else Path(path)


def is_code_source(path: str | None) -> bool:
    """Whether `path` names Python sources (`stdlib`, a `.py` file, or a folder holding `.py` files)."""
    if path is None or path.startswith("hf:"):
        return False
    root = source_root(path)
    return (
        path == STDLIB
        or root.suffix == ".py"
        or (root.is_dir() and next(root.rglob("*.py"), None) is not None)
    )


def python_files(root: Path) -> list[Path]:
    """The `.py` files of `root` in a fixed order (sorted relative paths); skipped folders are not entered."""
    if root.is_file():
        return [root]
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        found += [Path(folder, n) for n in names if n.endswith(".py")]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def functions_of(source: str) -> list[tuple[str, str]]:
    """(name, dedented source) of each top-level function and method of `source`; [] when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    lines = source.splitlines()
    nodes = list(tree.body) + [n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body]
    out = []
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.append((node.name, textwrap.dedent("\n".join(lines[first - 1 : node.end_lineno]))))
    return out


class FunctionPassages:
    """Draws the passages of each step as a pure function of (seed, step); `state_dict` for checkpoints."""

    def __init__(self, root: Path, seed: int = 0, min_chars: int = 20, max_chars: int = 2400):
        if not root.exists():
            raise ConfigError(
                "knowledge.path", f"{root} does not exist; give `stdlib` or a folder of .py files"
            )
        self.root, self.seed, self.min_chars, self.max_chars = root, seed, min_chars, max_chars
        self.files = python_files(root)
        if not self.files:
            raise ConfigError(
                "knowledge.path", f"{root} holds no .py files; give `stdlib` or a folder of them"
            )
        self.skips: Counter[str] = Counter()  # draws skipped, by reason
        self._cache: OrderedDict[int, list[tuple[str, str]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.files)

    def _functions(self, index: int) -> list[tuple[str, str]]:
        if index in self._cache:
            self._cache.move_to_end(index)
            return self._cache[index]
        path = self.files[index]
        try:
            data = path.read_bytes()
            found = [] if len(data) > MAX_FILE_BYTES else functions_of(data.decode("utf-8"))
        except (OSError, UnicodeDecodeError):
            found = []
        self._cache[index] = found
        if len(self._cache) > _CACHE_FILES:
            self._cache.popitem(last=False)
        return found

    def _draw(self, rng: random.Random) -> Passage:
        for _ in range(MAX_DRAWS):
            index = rng.randrange(len(self.files))
            found = self._functions(index)
            if not found:
                self.skips["no_function"] += 1
                continue
            name, text = found[rng.randrange(len(found))]
            if len(text.strip()) < self.min_chars:
                self.skips["too_short"] += 1
            elif len(text) > self.max_chars:
                self.skips["too_long"] += 1
            else:
                return Passage(id=f"{self.files[index].relative_to(self.root).as_posix()}:{name}", text=text)
        raise UserError(
            f"knowledge.path: {MAX_DRAWS} draws from {self.root} found no function of {self.min_chars} to "
            f"{self.max_chars} characters ({dict(self.skips)})"
        )

    def sample(self, step: int, k: int = 1) -> list[Passage]:
        rng = random.Random(f"code-passages:{self.seed}:{step}")
        return [self._draw(rng) for _ in range(k)]

    def state_dict(self) -> dict:
        return {"seed": self.seed, "num_files": len(self.files), "skips": dict(self.skips)}

    def load_state_dict(self, state: dict) -> None:
        if int(state["num_files"]) != len(self.files):
            raise ConfigError(
                "knowledge.path",
                f"the corpus has {len(self.files)} files but the checkpoint was made with {state['num_files']}; "
                "resume with the same Python (its standard library) or the same folder",
            )
        self.seed = int(state["seed"])
        self.skips = Counter({str(k): int(v) for k, v in state.get("skips", {}).items()})
