"""Hostile and damaged run directories: planted pickles never run, damaged checkpoints are named and skipped.

A run directory is copied between people, so every file `--resume` reads is treated as untrusted: torch files are
loaded with `weights_only=True`, weights only from safetensors, the rest is JSON. Each test plants a payload whose
unpickling would create a marker file, and re-signs the manifest as an attacker would, so the refusal comes from the
loader and not from the checksum.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from pasodoble.checkpoint import latest_checkpoint, write_manifest
from pasodoble.errors import UserError
from pasodoble.runs.train import prepare_resume
from tests.runs.test_resume import assert_same_run, build_loop


class Payload:
    """Unpickling this creates `marker`: a stand-in for arbitrary code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    loop, _ = build_loop(run_dir, steps=2)
    loop.run()
    return run_dir


def _resume(run_dir):
    loop, sampler = build_loop(run_dir, steps=4)
    return prepare_resume(run_dir, loop, sampler)


def _copy(trained_run, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(trained_run, run_dir)
    return run_dir, latest_checkpoint(run_dir)


@pytest.mark.parametrize("target", ["rng.pt", "proposer/trainer_state.pt", "solver/trainer_state.pt"])
def test_planted_pickle_in_a_torch_file_is_refused(trained_run, tmp_path, target):
    run_dir, ckpt = _copy(trained_run, tmp_path)
    marker = tmp_path / "pwned"
    torch.save({"torch": torch.get_rng_state(), "optimizer": Payload(marker)}, ckpt / target)
    (ckpt / "manifest.json").unlink()
    write_manifest(ckpt)
    with pytest.raises(UserError) as caught:
        _resume(run_dir)
    line = str(caught.value)
    assert line.startswith(f"{ckpt / target}: refused to load") and "\n" not in line
    assert not marker.exists()


def test_planted_pickled_weights_are_never_loaded(trained_run, tmp_path):
    run_dir, ckpt = _copy(trained_run, tmp_path)
    marker = tmp_path / "pwned"
    model_dir = ckpt / "solver" / "model"
    (model_dir / "model.safetensors").unlink()
    torch.save({"model.embed_tokens.weight": Payload(marker)}, model_dir / "pytorch_model.bin")
    (ckpt / "manifest.json").unlink()
    write_manifest(ckpt)
    with pytest.raises(UserError, match=f"{model_dir}: cannot load the saved weights"):
        _resume(run_dir)
    assert not marker.exists()


def _warnings(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]


def test_unsigned_planted_file_is_a_damaged_checkpoint(trained_run, tmp_path, capsys):
    run_dir, ckpt = _copy(trained_run, tmp_path)
    marker = tmp_path / "pwned"
    torch.save({"python": Payload(marker)}, ckpt / "rng.pt")
    capsys.readouterr()
    assert _resume(run_dir) == 1  # fell back to step-1
    warnings = _warnings(capsys)
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: checkpoint {ckpt} is damaged (rng.pt ")
    assert not marker.exists()


def test_damaged_newest_checkpoint_resumes_from_the_intact_one(tmp_path, capsys):
    full, _ = build_loop(tmp_path / "full", steps=4)
    full.run()
    cut, _ = build_loop(tmp_path / "cut", steps=4)
    cut.schedule.steps = 3
    cut.run()
    newest = latest_checkpoint(tmp_path / "cut")
    weights_file = newest / "solver" / "model" / "model.safetensors"
    weights_file.write_bytes(weights_file.read_bytes()[:1000])  # a truncated copy
    resumed, sampler = build_loop(tmp_path / "cut", steps=4)
    capsys.readouterr()
    assert prepare_resume(tmp_path / "cut", resumed, sampler) == 2
    warnings = _warnings(capsys)
    assert (
        len(warnings) == 1
        and "step-3 is damaged (solver/model/model.safetensors is 1000 bytes" in warnings[0]
    )
    resumed.run()
    assert_same_run(tmp_path / "full", full, tmp_path / "cut", resumed, 4)


def test_strict_resume_stops_with_one_line(trained_run, tmp_path):
    run_dir, ckpt = _copy(trained_run, tmp_path)
    (ckpt / "state.json").unlink()
    loop, sampler = build_loop(run_dir, steps=4)
    with pytest.raises(UserError, match=r"step-2 is damaged \(state.json is missing\)"):
        prepare_resume(run_dir, loop, sampler, strict=True)


def test_strict_resume_without_resume_is_a_user_error(capsys):
    from pasodoble.cli import main

    assert main(["train", "--config", "recipes/tiny-online.yaml", "--strict-resume"]) == 2
    assert "--strict-resume only applies with --resume RUN_DIR" in capsys.readouterr().err


def _tree(root):
    return sorted((str(p.relative_to(root)), p.is_symlink()) for p in root.rglob("*"))


def test_a_step_folder_linked_outside_the_run_is_refused_before_anything_changes(trained_run, tmp_path):
    run_dir, ckpt = _copy(trained_run, tmp_path)
    outside = tmp_path / "elsewhere" / ckpt.name
    outside.parent.mkdir()
    shutil.move(ckpt, outside)
    ckpt.symlink_to(outside, target_is_directory=True)
    (ckpt.parent / "step-9.tmp").mkdir()  # a leftover the resume would otherwise clean
    before = (_tree(run_dir), _tree(outside.parent), (run_dir / "metrics.jsonl").read_bytes())
    with pytest.raises(UserError) as caught:
        _resume(run_dir)
    line = str(caught.value)
    assert line.startswith(f"{ckpt} is a symbolic link (to {outside})") and "\n" not in line
    assert (_tree(run_dir), _tree(outside.parent), (run_dir / "metrics.jsonl").read_bytes()) == before
