"""Model specs are checked before any work: one line, exit 2, no run folder, no tiny-world build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest

import pasodoble.roles.models as models
from pasodoble.cli import main
from pasodoble.errors import ConfigError
from pasodoble.roles.models import check_model_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def empty_hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_accepts_model_folders_tiny_specs_and_cached_hub_ids(tiny_lm, empty_hub_cache, monkeypatch):
    check_model_spec(str(tiny_lm[2]), "solver.model")
    for spec in ("tiny:solver", "tiny:proposer", "tiny:base"):
        check_model_spec(spec)
    snapshot = empty_hub_cache / "models--org--cached" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (empty_hub_cache / "models--org--cached" / "refs").mkdir()
    (empty_hub_cache / "models--org--cached" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(models, "hub_reachable", lambda *a: pytest.fail("a cached model needs no network"))
    check_model_spec("org/cached")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("/nonexistent", "/nonexistent does not exist; give a model folder or a Hub id"),
        ("./no/such/model", "does not exist"),
        ("tiny:teacher", "unknown tiny model 'tiny:teacher'"),
        ("", "give a model folder"),
    ],
)
def test_rejects_paths_that_name_nothing(spec, message):
    with pytest.raises(ConfigError, match="^solver.model: .*" + message.replace("(", r"\(")):
        check_model_spec(spec, "solver.model")


def test_rejects_a_folder_or_file_that_is_not_a_model(tmp_path):
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(ConfigError, match="is a folder but not a Hugging Face model \\(no config.json\\)"):
        check_model_spec(str(tmp_path))
    with pytest.raises(ConfigError, match="is a file; give the model's folder"):
        check_model_spec(str(tmp_path / "weights.bin"))


def test_uncached_hub_id_without_a_hub_says_how_to_fix(empty_hub_cache, monkeypatch):
    monkeypatch.setattr(models, "hub_offline", lambda: False)
    monkeypatch.setattr(models, "hub_reachable", lambda *a: False)
    with pytest.raises(
        ConfigError, match="not in the local Hugging Face cache, and the Hub cannot be reached.*hf "
    ):
        check_model_spec("Qwen/Qwen3-1.7B-Base")
    monkeypatch.setattr(models, "hub_offline", lambda: True)
    with pytest.raises(
        ConfigError, match=r"HF_HUB_OFFLINE is set\); download it .*hf download Qwen/Qwen3-1.7B-Base"
    ):
        check_model_spec("Qwen/Qwen3-1.7B-Base")
    monkeypatch.setattr(models, "hub_offline", lambda: False)
    monkeypatch.setattr(models, "hub_reachable", lambda *a: True)
    check_model_spec("Qwen/Qwen3-1.7B-Base")  # reachable: transformers downloads it


def test_hub_probe_is_bounded_and_fails_without_network(monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "https://127.0.0.1:9")  # discard port: refused
    assert models.hub_reachable(timeout_s=2.0) is False


def _no_build(*args, **kwargs):
    raise AssertionError("the tiny world must not be built for a bad model spec")


@pytest.mark.parametrize(
    "override",
    ["proposer.model=/nonexistent", "solver.model=.", "proposer.model=tiny:x", "solver.model=org/absent"],
)
def test_train_with_a_bad_model_writes_nothing(tmp_path, capsys, monkeypatch, empty_hub_cache, override):
    import pasodoble.runs.train

    monkeypatch.setattr(pasodoble.runs.train, "ensure_sft_models", _no_build)
    monkeypatch.setattr(models, "hub_offline", lambda: True)
    run_dir = tmp_path / "run"
    argv = ["train", "--config", str(ROOT / "recipes" / "tiny-online.yaml"), override, f"run_dir={run_dir}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("pasodoble train: error: ")
    assert override.split("=")[0] in err and not run_dir.exists()


def test_eval_with_a_bad_model_reads_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(tmp_path), "--dataset", "missing.jsonl", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--model: " in err and "no config.json" in err
    assert not out.exists()


def _cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "PASODOBLE_CACHE": str(tmp_path / "tiny-cache"),
    }
    cmd = [sys.executable, "-m", "pasodoble", *args]
    return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_cli_train_nonexistent_solver_exits_2_with_one_line(tmp_path):
    recipe = str(ROOT / "recipes" / "tiny-online.yaml")
    done = _cli(["train", "--config", recipe, "solver.model=/nonexistent"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "pasodoble train: error: solver.model: /nonexistent does not exist; give a model folder or a Hub id "
        "such as Qwen/Qwen3-1.7B-Base"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no runs/, no tiny-world cache, no hub cache


def test_cli_eval_uncached_hub_id_offline_exits_2_with_one_line(tmp_path):
    (tmp_path / "set.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    done = _cli(["eval", "--model", "org/absent", "--dataset", "set.jsonl", "--out", "out"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert (
        len(done.stderr.splitlines()) == 1 and "org/absent" in done.stderr and "HF_HUB_OFFLINE" in done.stderr
    )
    assert not (tmp_path / "out").exists()


def test_a_pickled_model_file_is_one_line_saying_what_why_and_how_to_convert(tmp_path):
    """No traceback, no `weights_only=False`: the folder is refused before anything is loaded."""
    model = tmp_path / "pickled"
    model.mkdir()
    (model / "config.json").write_text("{}")
    marker = tmp_path / "pwned"
    payload = f"import torch, os\nclass P:\n    def __reduce__(self):\n        return (os.mkdir, ({str(marker)!r},))\n"
    payload += f"torch.save({{'w': P()}}, {str(model / 'pytorch_model.bin')!r})\n"
    subprocess.run([sys.executable, "-c", payload], check=True, timeout=120)
    (tmp_path / "set.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    done = _cli(["eval", "--model", str(model), "--dataset", "set.jsonl", "--out", "out"], tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert f"--model: refused {model / 'pytorch_model.bin'}: a pickled weight file" in line
    assert "save_pretrained" in line and "safetensors" in line and "weights_only" not in line
    assert not marker.exists() and not (tmp_path / "out").exists()
    (model / "model.safetensors").write_bytes(b"")  # safetensors beside it: the pickle is never read
    check_model_spec(str(model))
