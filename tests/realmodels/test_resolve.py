"""`pkg:` specs resolve wherever `tiny:` specs do (train, export, eval, sft, sft-data, layout), to the cached folder
and with no network once it is built (fast: the cache entry is a stand-in folder with a manifest)."""

from __future__ import annotations

import json

import pytest

from pasodoble.errors import UserError
from pasodoble.evals.cli import default_label, resolve_model_spec
from pasodoble.realmodels import entry_dir, resolve_pkg
from pasodoble.realmodels.store import build_entry
from pasodoble.runs.train import TrainConfig, resolve
from pasodoble.scale.layout import read_architecture
from pasodoble.sft.tiny import resolve_model

SPEC = "pkg:smollm2-135m-instruct"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PASODOBLE_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # a fetch would fail, not download

    def stand_in(out):
        (out / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 576}))
        return {"package": "stand-in"}

    return build_entry(entry_dir(SPEC), stand_in, progress=False)


def test_every_command_resolves_a_built_entry(cache, tmp_path):
    folder = str(cache)
    assert resolve_pkg(SPEC, progress=False) == folder
    assert resolve(SPEC, TrainConfig()) == folder  # train, export
    assert resolve(SPEC, TrainConfig(cache_dir=str(tmp_path))) == folder
    assert resolve_model(SPEC) == folder  # sft, sft-data's local teacher
    assert resolve_model_spec(SPEC) == folder and default_label(SPEC) == SPEC  # eval
    assert read_architecture(SPEC, str(tmp_path))["hidden_size"] == 576  # layout
    assert read_architecture("pkg:qwen3-random", str(tmp_path)) is None  # not built: nothing is fetched


def test_a_changed_entry_is_refused(cache):
    (cache / "config.json").write_text("{}")
    with pytest.raises(UserError, match="config.json is missing or changed"):
        resolve_model(SPEC)
