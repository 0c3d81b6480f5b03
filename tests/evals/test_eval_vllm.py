"""`pasodoble eval --engine vllm` against `--engine hf` on one small random Qwen3: greedy answers and scores agree.

The model is the vLLM engine tests' (head_dim 32, the CPU build's smallest attention head). Greedy answers of two engines can part at a
near-tie of two logits (different kernels round differently), hence "at least 95% identical", the acceptance rule
of issue 28. Marker `vllm`: run with `make test-vllm`.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]  # an engine start takes 20-90 s on a CPU

from pasodoble.cli import main  # noqa: E402
from tests.loop_helpers import make_tokenizer  # noqa: E402
from tests.rollout.test_vllm_engine import _model  # noqa: E402  (head_dim 32)

PROBLEMS = 20


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tokenizer = make_tokenizer()
    path = tmp_path_factory.mktemp("vllm-eval-model")
    _model(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def rows(out) -> dict:
    found = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {(r["id"], r["sample"]): r for r in found}


def test_vllm_engine_gives_the_hf_engines_greedy_answers(model_dir, tmp_path):
    data = tmp_path / "sums.jsonl"
    data.write_text(
        "".join(json.dumps({"question": f"{i}+{i}?", "answer": 2 * i}) + "\n" for i in range(PROBLEMS))
    )
    common = ["--model", str(model_dir), "--dataset", str(data), "--max-new-tokens", "24", "--no-progress"]
    assert main(["eval", *common, "--out", str(tmp_path / "hf")]) == 0
    assert main(["eval", *common, "--out", str(tmp_path / "vllm"), "--engine", "vllm"]) == 0
    hf, vllm = rows(tmp_path / "hf"), rows(tmp_path / "vllm")
    assert hf.keys() == vllm.keys() and len(hf) == PROBLEMS
    same = sum(hf[k]["response"] == vllm[k]["response"] for k in hf)
    assert same >= 0.95 * PROBLEMS, f"{same} of {PROBLEMS} greedy answers identical"
    results = [json.loads((tmp_path / d / "results.json").read_text()) for d in ("hf", "vllm")]
    assert results[1]["engine"] == "vllm"
    gap = abs(results[0]["average"]["avg@k"] - results[1]["average"]["avg@k"])
    assert gap <= 1 - same / PROBLEMS + 1e-9  # scores differ at most by the answers that differ
