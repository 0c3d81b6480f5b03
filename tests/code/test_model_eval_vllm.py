"""`pasodoble code-eval --model --engine vllm` against `--engine hf` on one small random Qwen3: the same greedy
completions (at least 95% identical, the rule of `tests/evals/test_eval_vllm.py`) and verdicts from the sandbox.
Marker `vllm`: run with `make test-vllm`."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.sandbox, pytest.mark.timeout(1800)]  # an engine start: 20-90 s

from pasodoble.cli import main  # noqa: E402
from tests.code.test_code_eval_cli import ROWS  # noqa: E402
from tests.loop_helpers import make_tokenizer  # noqa: E402
from tests.rollout.test_vllm_engine import _model  # noqa: E402  (head_dim 32)

PROBLEMS = 20


def _rows(out) -> dict:
    found = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {(r["id"], r["sample"]): r for r in found}


def test_vllm_engine_gives_the_hf_engines_completions_and_verdicts(tmp_path):
    tokenizer = make_tokenizer()
    model_dir = tmp_path / "model"
    _model(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    data = tmp_path / "code.jsonl"
    rows = [dict(ROWS[i % 2], task_id=f"t/{i}") for i in range(PROBLEMS)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ["code-eval", "--jsonl", str(data), "--model", str(model_dir), "--max-new-tokens", "24"]
    common += ["--no-progress", "--device", "cpu"]
    assert main([*common, "--out", str(tmp_path / "hf")]) == 0
    assert main([*common, "--out", str(tmp_path / "vllm"), "--engine", "vllm"]) == 0
    hf, vllm = _rows(tmp_path / "hf"), _rows(tmp_path / "vllm")
    assert hf.keys() == vllm.keys() and len(hf) == PROBLEMS
    same = [k for k in hf if hf[k]["response"] == vllm[k]["response"]]
    assert len(same) >= 0.95 * PROBLEMS, f"{len(same)} of {PROBLEMS} greedy completions identical"
    assert all(hf[k]["status"] == vllm[k]["status"] for k in same)
    assert json.loads((tmp_path / "vllm" / "results.json").read_text())["engine"] == "vllm"
