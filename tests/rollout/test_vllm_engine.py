"""VLLMEngine against the training model: log-probs, seeds, finish reasons, weight sync, LoRA adapters.

One engine for the whole module (an engine start takes 20-90 s on a CPU), with LoRA enabled so the adapter tests
share it. Marker `vllm`: run with `make test-vllm`.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from pasodoble.roles import adapters  # noqa: E402
from pasodoble.roles.adapters import LoraConfig  # noqa: E402
from pasodoble.rollout import SamplingParams  # noqa: E402
from pasodoble.rollout.settings import VLLMConfig  # noqa: E402
from tests.loop_helpers import make_tokenizer  # noqa: E402

TOL = 1e-4


def _model(tokenizer, seed: int = 0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,  # the CPU build's smallest attention head
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    return Qwen3ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from pasodoble.rollout.vllm import VLLMEngine

    tokenizer = make_tokenizer()
    model = _model(tokenizer)
    path = tmp_path_factory.mktemp("vllm-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    engine = VLLMEngine(
        VLLMConfig(enable_prefix_caching=True),
        path,
        tokenizer,
        max_model_len=128,
        adapters=("proposer", "solver"),
        max_lora_rank=8,
    )
    yield model, tokenizer, engine, path
    engine.close()


def _prompts(tokenizer):
    msgs = [[{"role": "user", "content": t}] for t in ("What is 2+3?", "Hi there")]
    return [_ids(tokenizer.apply_chat_template(m, add_generation_prompt=True)) for m in msgs]


def _ids(x):
    return list(x["input_ids"]) if hasattr(x, "keys") else list(x)


def _gap(model, prompt, completion, temperature: float) -> float:
    """Largest |engine log-prob - training model's log-prob| over one completion's tokens."""
    from pasodoble.update.logprobs import logprobs as token_logprobs

    ids = torch.tensor([prompt + completion.token_ids])
    mask = torch.ones_like(ids)
    comp = torch.zeros_like(ids, dtype=torch.float32)
    comp[0, len(prompt) :] = 1
    with torch.no_grad():
        want = token_logprobs(model, ids, mask, comp, temperature=temperature)[0, len(prompt) :]
    return float((torch.tensor(completion.logprobs) - want).abs().max())


def _max_gap(model, engine, prompts, sampling, **kw) -> float:
    out = engine.generate(prompts, sampling, **kw)
    t = sampling.temperature
    return max(_gap(model, p, c, t) for p, group in zip(prompts, out) for c in group)


def test_samples_logprobs_seeds_and_finish_reasons(world):
    model, tokenizer, engine, _ = world
    prompts = _prompts(tokenizer)
    sampling = SamplingParams(n=3, temperature=0.7, max_new_tokens=12, seed=5)
    out = engine.generate(prompts, sampling)
    assert [len(g) for g in out] == [3, 3]
    for p, group in zip(prompts, out):
        for c in group:
            assert 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
            assert c.finish_reason == ("stop" if c.token_ids[-1] == tokenizer.eos_token_id else "length")
            assert _gap(model, p, c, 0.7) < TOL
    again = engine.generate(prompts, sampling)
    other = engine.generate(prompts, SamplingParams(n=3, temperature=0.7, max_new_tokens=12, seed=6))
    ids = lambda o: [[c.token_ids for c in g] for g in o]  # noqa: E731
    assert ids(out) == ids(again) and ids(out) != ids(other)
    assert len({tuple(c.token_ids) for c in out[0]}) > 1  # n samples of one prompt differ
    assert _max_gap(model, engine, prompts, SamplingParams(n=1, temperature=0, max_new_tokens=8)) < TOL


def test_weight_sync_serves_fresh_weights_and_never_stale_ones(world):
    model, tokenizer, engine, _ = world
    prompts = _prompts(tokenizer)
    greedy = SamplingParams(n=1, temperature=0, max_new_tokens=10)
    assert _max_gap(model, engine, prompts, greedy) < TOL
    with torch.no_grad():  # an "update" that moves every weight, the tied embedding / head included
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    assert _max_gap(model, engine, prompts, greedy) > 1e-2  # not synced yet: the engine is stale
    engine.update_weights(model)
    assert _max_gap(model, engine, prompts, greedy) < TOL
    assert (
        _max_gap(model, engine, prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=1))
        < TOL
    )


def test_two_adapters_on_one_engine_each_sampled_with_its_own(world):
    model, tokenizer, engine, path = world
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(path).eval()
    engine.update_weights(base)  # the engine's base must be the saved one again
    lora = LoraConfig(rank=4, alpha=8.0)
    p_view = adapters.wrap_lora(base, "proposer", lora)
    s_view = adapters.add_adapter(p_view, "solver", lora)
    with torch.no_grad():
        for i, view in enumerate((p_view, s_view)):
            for p in view.parameters():
                p.copy_(torch.randn_like(p) * 0.2 * (i + 1))
    p_engine, s_engine = engine.for_adapter("proposer"), engine.for_adapter("solver")
    p_engine.update_weights(p_view)
    s_engine.update_weights(s_view)
    prompts = _prompts(tokenizer)
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=3)
    assert _max_gap(p_view.eval(), p_engine, prompts, sampling) < TOL
    assert _max_gap(s_view.eval(), s_engine, prompts, sampling) < TOL
    assert _max_gap(s_view, p_engine, prompts, sampling) > 1e-2  # adapters are not mixed up
    with torch.no_grad():  # an update of the Solver's adapter alone, served under a new LoRA id
        for p in s_view.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    assert _max_gap(s_view, s_engine, prompts, sampling) > 1e-2
    s_engine.update_weights(s_view)
    assert _max_gap(s_view, s_engine, prompts, sampling) < TOL
    assert _max_gap(p_view, p_engine, prompts, sampling) < TOL


def test_stop_strings_end_a_completion_after_its_first_stop(world):
    _, tokenizer, engine, _ = world
    prompts = _prompts(tokenizer)
    free = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=24))[0][0]
    stop = free.text[5:7]
    cut = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=24, stop=(stop,)))[0][0]
    assert cut.text == free.text[: free.text.find(stop) + len(stop)] and cut.finish_reason == "stop"
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)] and len(cut.logprobs) == len(cut.token_ids)
