"""Dependencies match the code: every required package and every extra is imported by the package, or is listed
below with the reason it is kept; the extras named in the README exist (see also tests/test_docs.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = {"math-verify": "math_verify", "pyyaml": "yaml", "tensorboard": "torch.utils.tensorboard"}
KEPT_WITHOUT_IMPORT = {  # distribution -> why it is required although no module of pasodoble/ imports it yet
}
TOOL_EXTRAS = {"dev"}  # test and lint tools, imported by tests/ and the Makefile, not by the package


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].strip().lower()


def _imported_modules() -> set[str]:
    names = set()
    for path in [*(ROOT / "pasodoble").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
    return names


def _is_imported(distribution: str, imported: set[str]) -> bool:
    module = MODULES.get(distribution, distribution.replace("-", "_"))
    return any(name == module or name.startswith(module + ".") for name in imported)


def test_every_dependency_and_extra_has_code_behind_it():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    imported = _imported_modules()
    required = [_name(r) for r in project["dependencies"]]
    unused = [d for d in required if not _is_imported(d, imported) and d not in KEPT_WITHOUT_IMPORT]
    assert not unused, f"required but never imported by pasodoble/: {unused}"
    stale = [d for d in KEPT_WITHOUT_IMPORT if d not in required or _is_imported(d, imported)]
    assert not stale, f"KEPT_WITHOUT_IMPORT entries to remove (imported now, or no longer required): {stale}"
    for extra, requirements in project["optional-dependencies"].items():
        if extra in TOOL_EXTRAS:
            continue
        idle = [_name(r) for r in requirements if not _is_imported(_name(r), imported)]
        assert not idle, f"extra {extra!r} installs packages no module imports: {idle}"
