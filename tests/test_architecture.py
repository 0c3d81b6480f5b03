"""The package's layers, held by its imports: no import cycle, and no module importing from a layer above its own.

Every module is parsed with `ast`; every `import` counts, the ones inside functions and `if TYPE_CHECKING:` too
(a function-local import that closes a cycle is still a cycle). `LAYERS` is the one statement of the layer order,
lowest first; a module belongs to the layer of the longest name in it that prefixes its own. A new subpackage must
be placed in `LAYERS` (the test names it otherwise). The README's "Architecture" section describes the same order.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "plumbing",
        (
            "pasodoble",
            "errors",
            "io",
            "jsonl",
            "strict_yaml",
            "threads",
            "allocator",
            "folders",
            "config",
            "checkpoint",
            "lazy",
        ),
    ),
    ("core", ("core", "grader", "kb", "realmodels", "sandbox", "qa")),
    ("update", ("update",)),
    ("domain plug-ins", ("domains",)),
    ("rollout", ("rollout",)),
    ("scale", ("scale",)),
    ("accel", ("accel", "accel_config")),
    ("roles", ("roles",)),
    ("loop", ("dualplay", "schedule")),
    ("reports", ("reports",)),
    ("world", ("world",)),
    ("tools", ("evals", "sft", "code")),
    ("runs", ("runs",)),
    ("entry", ("cli", "__main__")),
]


def module_names(root: Path, package: str = "pasodoble") -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `root/package` (a package is named by its __init__)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (`a.b.c` -> `a.b` when `c` is an attribute), else None."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path, package: str = "pasodoble") -> dict[str, dict[str, int]]:
    """module -> {imported project module: line of the first such import}, function-local imports included."""
    modules = module_names(root, package)
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                    base = f"{up}.{base}" if base else up
                targets = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                owner = _owner(target, modules) if target.split(".")[0] == package else None
                if owner is not None and owner != name:
                    graph[name].setdefault(owner, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def layer_of(module: str, layers=LAYERS, package: str = "pasodoble") -> int | None:
    """Index in `layers` of the longest member name that is `module` or a package above it."""
    best, best_len = None, -1
    for i, (_, members) in enumerate(layers):
        for member in members:
            full = package if member == package else f"{package}.{member}"
            if (module == full or module.startswith(full + ".")) and len(full) > best_len:
                best, best_len = i, len(full)
    return best


def upward_imports(graph: dict[str, dict[str, int]], layers=LAYERS, package: str = "pasodoble") -> list[str]:
    """'a (layer) imports b (higher layer) at line n' for every import that points up the layer order."""
    out = []
    for module, targets in sorted(graph.items()):
        mine = layer_of(module, layers, package)
        for target, line in sorted(targets.items()):
            theirs = layer_of(target, layers, package)
            if mine is not None and theirs is not None and theirs > mine:
                out.append(
                    f"{module} ({layers[mine][0]}) imports {target} ({layers[theirs][0]}) at line {line}"
                )
    return out


def test_every_module_has_a_layer():
    unplaced = [m for m in module_names(ROOT) if layer_of(m) is None]
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"


def test_every_package_folder_has_an_init():
    """A folder of modules without `__init__.py` imports as a namespace package but is left out of the wheel."""
    folders = {p.parent for p in (ROOT / "pasodoble").rglob("*.py") if "__pycache__" not in p.parts}
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_no_import_cycles():
    assert cycles(import_graph(ROOT)) == []


def test_no_module_imports_from_a_higher_layer():
    assert upward_imports(import_graph(ROOT)) == []


def imports_of_package(graph: dict[str, dict[str, int]], package: str) -> list[str]:
    """'a imports b at line n' for every import of a module under `package` by a module outside it."""
    inside = lambda name: name == package or name.startswith(package + ".")  # noqa: E731
    return [
        f"{module} imports {target} at line {line}"
        for module, targets in sorted(graph.items())
        if not inside(module)
        for target, line in sorted(targets.items())
        if inside(target)
    ]


def test_core_is_the_method_alone():
    """`core/` imports nothing from update batching or the accelerator package (the layers say so too; this names
    the two packages a newcomer might reach for)."""
    graph = import_graph(ROOT)
    core = {m: t for m, t in graph.items() if m == "pasodoble.core" or m.startswith("pasodoble.core.")}
    assert imports_of_package(core, "pasodoble.update") == []
    assert imports_of_package(core, "pasodoble.accel") == []


def test_only_the_door_of_the_accelerator_package_is_imported():
    """Outside `pasodoble.accel`, code imports the package itself (`apply`, `status`, ...), never a kernel module."""
    found = imports_of_package(import_graph(ROOT), "pasodoble.accel")
    assert found, "nothing imports the accelerator package: the check would pass for nothing"
    assert [line for line in found if not line.split(" imports ")[1].startswith("pasodoble.accel ")] == []


def test_compiled_sources_sit_in_the_accelerator_package():
    sources = [p for p in (ROOT / "pasodoble").rglob("*") if p.suffix in (".c", ".h", ".cc", ".cpp", ".cu")]
    assert sources, "no compiled source found: the check would pass for nothing"
    csrc = ROOT / "pasodoble" / "accel" / "csrc"
    assert [str(p.relative_to(ROOT)) for p in sources if p.parent != csrc] == []


def test_the_package_data_ships_the_compiled_sources():
    """The wheel carries `accel/csrc/*.c` and `*.h` (built on first use): pyproject's package data names them."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = data["pasodoble.accel"]
    csrc = ROOT / "pasodoble" / "accel"
    shipped = {p for pattern in patterns for p in csrc.glob(pattern)}
    assert shipped == set((csrc / "csrc").glob("*.[ch]")) and shipped


def test_the_checks_find_a_planted_cycle_and_upward_import(tmp_path):
    pkg = tmp_path / "pasodoble"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text(
        "def f():\n    from pasodoble.core import b\n"
    )  # local import: counted
    (pkg / "core" / "b.py").write_text("from pasodoble.core.a import f\n")
    (pkg / "errors.py").write_text("from .core import a\n")  # relative and upward
    graph = import_graph(tmp_path)
    assert cycles(graph) == [["pasodoble.core.a", "pasodoble.core.b"]]
    assert upward_imports(graph) == ["pasodoble.errors (plumbing) imports pasodoble.core.a (core) at line 1"]
