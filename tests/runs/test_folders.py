"""Commands write only into a folder that is theirs: `sft --out`, `sft-data out_dir=` and `train run_dir=` refuse a
non-empty folder another command (or nobody) made, in one line, and leave it byte for byte as it was.

The train run is a real one-step `pasodoble train` (CLI, in process) on a tiny random Qwen3 (seconds); the sft
runs train that model for one step.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from pasodoble.cli import main
from pasodoble.errors import UserError
from pasodoble.folders import OWNER_FILE, check_folder, claim_folder, folder_owner
from tests.runs.test_resume_changes import make_trained, train_argv


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return make_trained(tmp_path_factory.mktemp("folders"))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def sft_argv(trained: Path, out: Path, data: Path | None = None) -> list[str]:
    if data is None:
        data = trained / "sft.jsonl"
        rows = [{"prompt": f"{i}+1?", "completion": f"\\boxed{{{i + 1}}}"} for i in range(4)]
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [
        "sft",
        "--model",
        str(trained / "base"),
        "--data",
        str(data),
        "--out",
        str(out),
        "--max-steps",
        "1",
        "--batch-size",
        "2",
        "--threads",
        "1",
        "--no-progress",
    ]


def test_sft_out_into_a_train_run_is_refused_and_the_run_is_untouched(trained, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(trained / "run", run_dir)
    (run_dir / OWNER_FILE).unlink()  # a run written before folders had owners: known by its config.yaml
    before = snapshot(run_dir)
    assert main(sft_argv(trained, run_dir)) == 2
    line = one_error(capsys)
    assert f"--out {run_dir}: this folder holds the output of `pasodoble train`" in line
    assert snapshot(run_dir) == before
    assert main(["train", "--resume", str(run_dir), "schedule.steps=2"]) == 0


def test_sft_data_out_dir_into_a_train_run_is_refused(trained, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(trained / "run", run_dir)
    before = snapshot(run_dir)
    recipe = tmp_path / "sft-data.yaml"
    teacher = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": None}
    recipe.write_text(yaml.safe_dump({"out_dir": str(run_dir), "teacher": teacher}))
    assert main(["sft-data", "--config", str(recipe), "--no-progress"]) == 2
    assert f"out_dir {run_dir}: this folder holds the output of `pasodoble train`" in one_error(capsys)
    assert snapshot(run_dir) == before


def test_sft_reruns_into_its_own_folder_and_train_refuses_it(trained, tmp_path, capsys):
    out = tmp_path / "sft"
    assert main(sft_argv(trained, out)) == 0
    assert main(sft_argv(trained, out)) == 0  # its own folder: a rerun replaces it
    capsys.readouterr()
    before = snapshot(out)
    assert main(train_argv(trained, out)) == 2
    assert f"run_dir {out}: this folder holds the output of `pasodoble sft`" in one_error(capsys)
    assert snapshot(out) == before


def test_train_refuses_a_folder_of_other_files(trained, tmp_path, capsys):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("keep me\n")
    assert main(train_argv(trained, mine)) == 2
    assert "holds files pasodoble did not write" in one_error(capsys)
    assert sorted(p.name for p in mine.iterdir()) == ["todo.txt"]


def test_sft_with_data_dev_zero_says_it_is_not_a_regular_file(trained, tmp_path, capsys):
    assert main(sft_argv(trained, tmp_path / "out", data=Path("/dev/zero"))) == 2
    line = one_error(capsys)
    assert "--data /dev/zero: not a regular file" in line and "not found" not in line


def test_owner_marker_and_older_folders(tmp_path):
    assert claim_folder(tmp_path / "new", "export", "--out") == tmp_path / "new"
    assert folder_owner(tmp_path / "new") == "export"
    check_folder(tmp_path / "new", "export", "--out")
    with pytest.raises(UserError, match="holds the output of `pasodoble export`"):
        check_folder(tmp_path / "new", "sft", "--out")
    old = tmp_path / "old-export"
    (old / "solver").mkdir(parents=True)
    assert folder_owner(old) == "export"
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        check_folder(tmp_path / "file", "sft", "--out")
    for keys, owner in (({"teacher": {}}, "sft-data"), ({"data": "d", "sft": {}}, "sft"), ({"a": 1}, None)):
        folder = tmp_path / f"cfg-{owner}"
        folder.mkdir()
        (folder / "config.yaml").write_text(yaml.safe_dump(keys))
        assert folder_owner(folder) == owner
