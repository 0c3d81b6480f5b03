"""`pasodoble export` ships only verified checkpoints: damaged bytes, a `latest` pointing out of `checkpoints/` and
symbolic links inside a checkpoint are refused or ignored; a second export into one `--out` leaves nothing stale.

The run is a real one-step `pasodoble train` of LoRA roles on a tiny random Qwen3 (tests/runs/test_resume_changes.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pasodoble.checkpoint import latest_checkpoint, write_manifest
from pasodoble.cli import main
from pasodoble.io import current_umask
from pasodoble.roles.adapters import ADAPTER_FILE
from tests.runs.test_resume_changes import make_trained


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return make_trained(tmp_path_factory.mktemp("export"))


@pytest.fixture
def run_dir(trained, tmp_path) -> Path:
    shutil.copytree(trained / "run", tmp_path / "run")
    return tmp_path / "run"


def one_error(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-16])


@pytest.mark.parametrize(("damage", "says"), [(flip_bytes, "sha256"), (truncate, "the manifest says")])
def test_a_damaged_checkpoint_is_not_exported(run_dir, tmp_path, capsys, damage, says):
    adapter = latest_checkpoint(run_dir) / "solver" / "model" / ADAPTER_FILE
    damage(adapter)
    assert main(["export", str(run_dir), "--out", str(tmp_path / "out")]) == 2
    line = one_error(capsys)
    assert "is damaged" in line and says in line and "solver/model/" + ADAPTER_FILE in line
    assert not (tmp_path / "out").exists()


def test_a_second_export_leaves_no_stale_adapter(run_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    assert (out / "solver" / ADAPTER_FILE).is_file()
    assert main(["export", str(run_dir), "--merge", "--out", str(out)]) == 0
    names = {p.name for p in (out / "solver").iterdir()}
    assert "model.safetensors" in names and not names & {ADAPTER_FILE, "adapter_config.json"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no temporary folder left
    assert (
        out.stat().st_mode & 0o777 == 0o777 & ~current_umask()
    )  # a folder the team can read, as mkdir gives


def test_latest_naming_a_folder_outside_checkpoints_is_ignored(run_dir, tmp_path):
    own = latest_checkpoint(run_dir)
    planted = tmp_path / "elsewhere" / "step-9"
    shutil.copytree(own, planted)
    flip_bytes(planted / "solver" / "model" / ADAPTER_FILE)
    (planted / "manifest.json").unlink()
    write_manifest(planted)  # signed as an attacker would: the manifest check alone would pass it
    (run_dir / "checkpoints" / "latest").write_text("../../elsewhere/step-9\n")
    assert latest_checkpoint(run_dir) == own
    out = tmp_path / "out"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    exported = (out / "solver" / ADAPTER_FILE).read_bytes()
    assert exported == (own / "solver" / "model" / ADAPTER_FILE).read_bytes()


def test_a_symlink_inside_a_checkpoint_is_refused(run_dir, tmp_path, capsys):
    adapter = latest_checkpoint(run_dir) / "solver" / "model" / ADAPTER_FILE
    outside = tmp_path / "outside.safetensors"
    shutil.move(adapter, outside)
    adapter.symlink_to(outside)  # the same bytes: the manifest's sizes and checksums still match
    assert main(["export", str(run_dir), "--out", str(tmp_path / "out")]) == 2
    assert "is a symbolic link" in one_error(capsys)
    assert not (tmp_path / "out").exists()


def test_export_refuses_an_out_folder_it_did_not_make(run_dir, tmp_path, capsys):
    assert main(["export", str(run_dir), "--out", str(run_dir)]) == 2
    assert "holds the output of `pasodoble train`" in one_error(capsys)
