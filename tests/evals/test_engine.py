"""`pasodoble eval --engine ...`: engines built by the training factory, flags checked as a role's settings."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from pasodoble.cli import main
from tests.evals.completions_server import CompletionsServer


@pytest.fixture()
def sums(tmp_path):
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"question": f"{i}+{i}?", "answer": 2 * i}) + "\n" for i in range(6)))
    return path


def _args(model, data, out, *extra):
    return ["eval", "--model", str(model), "--dataset", str(data), "--out", str(out), "--no-progress"] + [
        "--max-new-tokens",
        "6",
        *extra,
    ]


def _responses(out) -> dict:
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {(r["id"], r["sample"]): r["response"] for r in rows}


@pytest.mark.parametrize(
    "flags, line",
    [
        (
            (
                "--engine",
                "vllm_server",
                "--server-url",
                "http://127.0.0.1:9",
                "--gpu-memory-utilization",
                "1.5",
            ),
            "--gpu-memory-utilization: must be in (0, 1], got 1.5",
        ),
        (
            ("--engine", "vllm_server", "--server-url", "http://127.0.0.1:9", "--tensor-parallel-size", "3"),
            "--tensor-parallel-size: 3 does not divide the model's 4 attention heads",
        ),
        (("--server-url", "http://127.0.0.1:9"), "--server-url: only --engine vllm_server talks to a server"),
        (("--adapter", "nowhere"), "--adapter: nowhere/adapter_config.json not found"),
        (("--distributed-timeout-s", "0"), "--distributed-timeout-s: must be > 0"),
    ],
)
def test_engine_flags_are_checked_as_a_roles_settings_before_anything_loads(
    tiny_lm, sums, tmp_path, capsys, flags, line
):
    out = tmp_path / "run"
    assert main(_args(tiny_lm[2], sums, out, *flags)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err
    assert not out.exists()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is importable here")
def test_vllm_engine_without_vllm_says_how_to_install_it(tiny_lm, sums, tmp_path, capsys):
    assert main(_args(tiny_lm[2], sums, tmp_path / "run", "--engine", "vllm")) == 2
    assert "--engine: engine=vllm needs the vllm package" in capsys.readouterr().err


def test_a_given_server_answers_as_the_hf_engine_does(tiny_lm, sums, tmp_path):
    """`--engine vllm_server --server-url`: the factory's server engine, greedy answers equal to HF generate's."""
    assert main(_args(tiny_lm[2], sums, tmp_path / "hf")) == 0
    with CompletionsServer(tiny_lm[2]) as server:
        args = _args(
            tiny_lm[2], sums, tmp_path / "server", "--engine", "vllm_server", "--server-url", server.url
        )
        assert main(args) == 0
        assert server.requests == 6  # one request per prompt: every problem went through the server
    assert _responses(tmp_path / "server") == _responses(tmp_path / "hf")
    result = json.loads((tmp_path / "server" / "results.json").read_text())
    assert result["engine"] == "vllm_server"


def test_a_lora_adapter_folder_is_sampled_with_its_base(tiny_lm, sums, tmp_path):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from pasodoble.roles.adapters import AdapterView, LoraConfig, peft_config

    path = tiny_lm[2]
    model = AutoModelForCausalLM.from_pretrained(path)  # a copy: the session's shared model stays untouched
    peft = get_peft_model(
        model, peft_config(LoraConfig(rank=4, target_modules=["q_proj", "v_proj"])), "solver"
    )
    torch.manual_seed(1)
    with torch.no_grad():  # a fresh adapter is the identity (B = 0); give it weights that change the answers
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 1.0)
    AdapterView(peft, "solver").save_adapter(tmp_path / "adapter")
    assert main(_args(path, sums, tmp_path / "base")) == 0
    assert main(_args(path, sums, tmp_path / "lora", "--adapter", str(tmp_path / "adapter"))) == 0
    assert _responses(tmp_path / "lora") != _responses(tmp_path / "base")
