"""A resume with changed overrides: a failed one keeps the run's config.yaml, a shape change is one line naming
what differs (LoRA rank, model shape), a changed `num_generations` is said out loud.

The run is a real one-step `pasodoble train` (CLI, in process) of LoRA roles on a tiny random Qwen3 (seconds).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from pasodoble.cli import main
from pasodoble.errors import UserError
from pasodoble.io import read_jsonl
from pasodoble.roles.adapters import LoraConfig
from pasodoble.roles.role import Role, RoleConfig
from tests.loop_helpers import make_model, make_tokenizer, save_tiny

ROOT = Path(__file__).resolve().parents[2]


def _save_wide(folder: Path) -> Path:
    """A tiny model twice as wide as `save_tiny`'s: same vocabulary, other weight shapes."""
    tokenizer = make_tokenizer()
    make_model(tokenizer, seed=0, hidden_size=64).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def train_argv(work: Path, run_dir: Path) -> list[str]:
    base = work / "base"
    return [
        "train",
        "--config",
        str(ROOT / "recipes" / "tiny-online.yaml"),
        f"run_dir={run_dir}",
        f"proposer.model={base}",
        f"solver.model={base}",
        f"knowledge.path={work / 'corpus.txt'}",
        "schedule.steps=1",
        "schedule.checkpoint_every=1",
        "schedule.passages_per_step=1",
        "proposer.num_generations=2",
        "solver.num_generations=2",
        "proposer.max_completion_length=8",
        "solver.max_completion_length=8",
        "proposer.lora.rank=4",
        "solver.lora.rank=4",
        "num_threads=1",
        "logging.quiet=true",
    ]


def make_trained(work: Path) -> Path:
    """`work` with base/ and wide/ models, corpus.txt and run/ (one trained step); returns `work`."""
    save_tiny(work / "base", seed=0)
    _save_wide(work / "wide")
    (work / "corpus.txt").write_text(
        "\n\n".join(f"passage {i}: {i} apples and {i + 1} pears" for i in range(6))
    )
    assert main(train_argv(work, work / "run")) == 0
    return work


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return make_trained(tmp_path_factory.mktemp("resume-changes"))


def _copy(trained: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(trained / "run", run_dir)
    return run_dir


def _error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1, err
    return err[0]


def test_a_failed_resume_keeps_the_config_and_a_plain_resume_still_works(trained, tmp_path, capsys):
    run_dir = _copy(trained, tmp_path)
    before = (run_dir / "config.yaml").read_bytes()
    wide = trained / "wide"
    assert main(["train", "--resume", str(run_dir), f"proposer.model={wide}", f"solver.model={wide}"]) == 2
    line = _error_line(capsys)
    assert "does not fit this model" in line and "size mismatch" in line
    assert (run_dir / "config.yaml").read_bytes() == before
    assert main(["train", "--resume", str(run_dir), "schedule.steps=2"]) == 0
    assert [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]
    assert "steps: 2" in (run_dir / "config.yaml").read_text()  # rewritten once the checkpoint loaded


def test_a_resume_with_another_lora_rank_is_one_line_naming_it(trained, tmp_path, capsys):
    run_dir = _copy(trained, tmp_path)
    before = (run_dir / "config.yaml").read_bytes()
    assert main(["train", "--resume", str(run_dir), "solver.lora.rank=8"]) == 2
    line = _error_line(capsys)
    assert "solver.lora.rank=8 differs from the run's 4" in line
    assert (run_dir / "config.yaml").read_bytes() == before


def test_a_resume_that_changes_num_generations_says_so(trained, tmp_path, capsys):
    run_dir = _copy(trained, tmp_path)
    argv = ["train", "--resume", str(run_dir), "schedule.steps=2", "solver.num_generations=3"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "solver.num_generations changes from 2 to 3 on resume" in err


def test_loading_another_shape_is_one_line(trained, tmp_path):
    """Below the CLI's check: the role itself names a LoRA rank or a model shape that differs."""
    cfg = RoleConfig(model="test", num_generations=2, max_completion_length=8, lr=1e-3)
    full = Role.from_pretrained("solver", cfg, trained / "base")
    full.save(tmp_path / "full")
    with pytest.raises(UserError) as caught:
        Role.from_pretrained("solver", cfg, trained / "wide").load_state(tmp_path / "full")
    line = str(caught.value)
    assert "shape differs" in line and "size mismatch" in line and "\n" not in line
    ckpt = next((trained / "run" / "checkpoints").glob("step-*")) / "solver"
    ranked = replace(cfg, lora=LoraConfig(rank=8))
    with pytest.raises(UserError, match="LoRA rank is 4, solver.lora.rank is 8"):
        Role.from_pretrained("solver", ranked, trained / "base").load_state(ckpt)
