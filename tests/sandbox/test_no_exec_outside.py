"""Model-written code is executed only by the runner inside the jail: no eval, exec, compile or pickle elsewhere in
the sandbox and code packages and the code domain (the trainer side reads verdicts with `json` only)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_MODULES = {"pickle", "marshal", "shelve", "dill", "cloudpickle"}


def offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            found.append(f"{path.name}:{node.lineno} {node.func.id}()")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [
                f"{path.name}:{node.lineno} import {n}" for n in names if n.split(".")[0] in FORBIDDEN_MODULES
            ]
    return found


def test_only_the_runner_executes_programs():
    files = [
        *(ROOT / "pasodoble" / "sandbox").glob("*.py"),
        *(ROOT / "pasodoble" / "code").glob("*.py"),
        *(ROOT / "pasodoble" / "domains").glob("code*.py"),
    ]
    assert len(files) > 12
    outside = {p.name: offences(p) for p in files if p.name != "runner.py"}
    assert {k: v for k, v in outside.items() if v} == {}
    assert any("exec()" in o for o in offences(ROOT / "pasodoble" / "sandbox" / "runner.py"))
