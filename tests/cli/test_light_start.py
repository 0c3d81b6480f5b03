"""`pasodoble --version`, `--help`, every command's `--help`, a mistyped command, `config keys` / `config show` and
the argument and config errors of every command tested here answer before torch or transformers is imported: the
command line imports only the module of the command it was given, and every command reads and checks its flags and
recipe before it imports what runs it.

Each case runs the command line in a fresh interpreter with an import hook that records every top-level package
imported (it changes nothing); no timing is taken.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pasodoble.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers")
RUN = """
import json, sys
seen = set()
class Record:
    def find_spec(self, name, path=None, target=None):
        seen.add(name.split(".")[0])
        return None
sys.meta_path.insert(0, Record())
from pasodoble.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
sys.stdout.flush()
print("\\nIMPORTED " + json.dumps(sorted(seen)))
sys.exit(code)
"""


def _run(*args: str) -> tuple[int, str, str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", RUN, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    text, _, imported = out.stdout.rpartition("\nIMPORTED ")
    return out.returncode, text, out.stderr, json.loads(imported)


@pytest.mark.parametrize(
    ("args", "code", "shows"),
    [
        (("--version",), 0, "pasodoble 0.1.0"),
        (("--help",), 0, "demo-real"),
        ((), 2, "<command>"),
        (("trian",), 2, "invalid choice: 'trian'"),
        (("plot", "no-such-run"), 2, "metrics.jsonl not found"),
        (("inspect", "no-such-run"), 2, "samples.jsonl not found"),
        (("plot",), 2, "the following arguments are required: run_dir"),
        (("config", "show", "--kind", "nope"), 2, "invalid choice: 'nope'"),
        (("experiment", "recipes/tiny-ablation.yaml", "bogus=1"), 2, "bogus: unknown key"),
        (("kb", "stats", "no-such.jsonl"), 2, "no-such.jsonl does not exist"),
        (("verify-answers", "no-such-file.jsonl", "--out", "o.jsonl"), 2, "no-such-file.jsonl"),
        (("train", "--config", "recipes/tiny-online.yaml", "bogus.key=1"), 2, "bogus: unknown key"),
        (("train", "--config", "recipes/tiny-online.yaml", "solver.lr=-1"), 2, "solver.lr: lr and beta"),
        (("train", "--config", "recipes/tiny-online.yaml", "schedule.steps=x"), 2, "schedule.steps"),
        (("train", "--resume", "no-such-run"), 2, "no config.yaml there"),
        (("train",), 2, "pass --config RECIPE"),
        (("config", "keys"), 0, "accel.cpu_matmul"),
        (("config", "keys", "--kind", "demo"), 0, "dualplay.steps"),
        (("config", "show", "recipes/tiny-online.yaml"), 0, "schedule:"),
        (("demo", "bogus=1"), 2, "bogus: unknown key"),
        (("layout", "--config", "recipes/tiny-online.yaml", "bogus=1"), 2, "bogus: unknown key"),
        (
            ("eval", "--model", "no/such/model", "--benchmarks", "gsm8k", "--out", "o"),
            2,
            "no/such/model does not",
        ),
        (
            ("eval", "--model", "tiny:solver", "--num-samples", "0", "--out", "o"),
            2,
            "num_samples: must be >= 1",
        ),
        (("eval", "--model", "tiny:solver"), 2, "the following arguments are required: --out"),
        (("eval-table", "no-such-dir"), 2, "no-such-dir/results.json: not found"),
        (("demo-real", "bogus=1"), 2, "bogus: unknown key"),
        (("demo-real", "--quick", "bogus=1"), 2, "bogus: unknown key"),  # the quick recipe is found
        (("demo-real", "--quick", "--config", "x.yaml"), 2, "give either --quick or --config"),
        (("demo-real", "seeds=[0,0]"), 2, "seeds: give one or more distinct seeds"),
        (("demo-qa", "bogus=1"), 2, "bogus: unknown key"),
        (
            ("demo-qa", "--config", "recipes/tiny-qa.yaml", "conditions=[nope]"),
            2,
            "conditions: use one or both",
        ),
        (
            ("sft", "--model", "tiny:base", "--data", "no-such.jsonl", "--out", "o"),
            2,
            "no-such.jsonl: file not found",
        ),
        (("sft", "--data", "x.jsonl"), 2, "model: is required"),
        (("sft", "--max-steps", "x"), 2, "argument --max-steps: invalid int value"),
        (
            ("sft", "--model", "tiny:base", "--data", "x", "--out", "o", "dtype=float8"),
            2,
            "dtype: must be one of",
        ),
        (("sft-data", "--config", "recipes/cold-start-tiny.yaml", "bogus=1"), 2, "bogus: unknown key"),
        (("sft-data",), 2, "the following arguments are required: --config"),
        (("export", "no-such-run", "--out", "o"), 2, "no-such-run: not a folder"),
        (("export", "recipes", "--out", "o"), 2, "recipes: no complete checkpoint"),
        (("code-eval", "--canonical", "--k", "x", "--out", "o"), 2, "--k 'x': give positive integers"),
        (("code-eval", "--model", "tiny:solver", "--k", "10", "--out", "o"), 2, "pass@10 needs --n >= 10"),
        (
            ("code-eval", "--jsonl", "no-such.jsonl", "--canonical", "--out", "o"),
            2,
            "no-such.jsonl not found",
        ),
        (("serve", "--model", "m", "--host", "0.0.0.0"), 2, "set --allow-remote to accept that"),
        (("serve", "--model", "m", "--gpu-memory-utilization", "2"), 2, "gpu_memory_utilization: must be in"),
        (("serve", "--model", "m", "--weight-sync", "direct"), 2, "--weight-sync: invalid choice: 'direct'"),
    ],
)
def test_answers_before_torch_is_imported(args, code, shows):
    returncode, stdout, stderr, imported = _run(*args)
    assert returncode == code, stderr[-2000:]
    assert shows in stdout + stderr
    assert not set(HEAVY) & set(imported), f"{args}: imported {set(HEAVY) & set(imported)}"
    if code == 2 and stderr:
        assert "Traceback" not in stderr


@pytest.mark.parametrize("command", [name for name, _, _ in COMMANDS])
def test_every_commands_help_answers_before_torch_is_imported(command):
    returncode, stdout, stderr, imported = _run(command, "--help")
    assert returncode == 0, stderr[-2000:]
    assert f"usage: pasodoble {command}" in stdout
    assert not set(HEAVY) & set(imported), f"{command} --help: imported {set(HEAVY) & set(imported)}"


def test_top_level_help_lines_are_the_commands_own():
    """`COMMANDS` names every command with the help line its module registers (a renamed command or a changed line
    would leave `pasodoble --help` out of date)."""
    full = next(a for a in build_parser()._actions if a.dest == "command")
    registered = {action.dest: action.help for action in full._choices_actions}
    assert registered == {name: help_line for name, _, help_line in COMMANDS}
