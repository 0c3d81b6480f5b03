"""The padding-free layout: one row of concatenated samples, positions restarting per sample, no attention mask;
transformers masks the sequences apart, and the log-probs and gradients equal the padded reference's."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from pasodoble.update.logprobs import full_logprobs
from pasodoble.update.padding_free import attention_for, flatten, padding_free_logprobs, usable

PROMPTS = [[5, 6, 7], [9, 10], [5, 6, 7], [11], [12, 13, 14, 15]]
COMPLETIONS = [[20, 21, 22, 23], [24], [25, 26], [27, 28, 29], []]


def _model(kind: str, attention: str):
    torch.manual_seed(0)
    sizes = dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
    )  # fmt: skip
    config = Qwen2Config(**sizes) if kind == "qwen2" else LlamaConfig(**sizes)
    config._attn_implementation = attention
    model = (Qwen2ForCausalLM if kind == "qwen2" else LlamaForCausalLM)(config).float()
    return model.train()


def _padded(prompts, completions, pad_id=0):
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    ids = torch.full((len(prompts), width), pad_id)
    attention, completion = torch.zeros_like(ids), torch.zeros(ids.shape)
    for b, (p, c) in enumerate(zip(prompts, completions)):
        ids[b, : len(p) + len(c)] = torch.tensor([*p, *c])
        attention[b, : len(p) + len(c)] = 1
        completion[b, len(p) : len(p) + len(c)] = 1
    return ids, attention, completion


def test_flatten_restarts_positions_per_sample_and_indexes_the_plain_layout():
    flat = flatten([[7, 8], [9]], [[1, 2, 3], [4]], width=5)
    # sample 0 feeds 7 8 1 2 (not its last token), sample 1 feeds 9
    assert flat["input_ids"].tolist() == [[7, 8, 1, 2, 9]]
    assert flat["position_ids"].tolist() == [[0, 1, 2, 3, 0]]
    assert flat["cu_seq_lens"].tolist() == [0, 4, 5] and flat["max_length"] == 4
    # each completion token from the state before it; placed at (b, column) of the (2, 5) plain layout
    assert flat["source"].tolist() == [1, 2, 3, 4] and flat["target"].tolist() == [1, 2, 3, 4]
    assert flat["place"].tolist() == [2, 3, 4, 5 + 1]
    with pytest.raises(ValueError, match="non-empty prompt"):
        flatten([[]], [[1]], width=2)


@pytest.mark.parametrize(
    ("kind", "attention", "chunk", "head_outside"),
    [("qwen2", "sdpa", 3, True), ("llama", "eager", 2048, True), ("qwen2", "sdpa", 3, False)],
)
def test_logprobs_and_gradients_equal_the_padded_reference(kind, attention, chunk, head_outside):
    # head_outside=False: the head inside the forward, scoring the row's whole logits (ZeRO-3's partitioned head)
    model = _model(kind, attention)
    ids, mask, completion = _padded(PROMPTS, COMPLETIONS)
    weights = torch.randn(ids.shape, generator=torch.Generator().manual_seed(1))
    out = {}
    for name in ("padded", "padding_free"):
        model.zero_grad(set_to_none=True)
        if name == "padded":
            logps = full_logprobs(model, ids, mask, completion, temperature=0.7)
        else:
            flat = flatten(PROMPTS, COMPLETIONS, ids.shape[1])
            logps = padding_free_logprobs(
                model, flat, len(PROMPTS), ids.shape[1], temperature=0.7, chunk_tokens=chunk,
                head_outside_forward=head_outside,
            )  # fmt: skip
        (logps * weights).sum().backward()
        out[name] = (logps.detach(), [p.grad.clone() for p in model.parameters()])
    (ref, ref_grads), (got, grads) = out["padded"], out["padding_free"]
    assert (got != 0).sum() == completion.sum()  # every completion token scored, nothing else
    torch.testing.assert_close(got, ref, atol=2e-6, rtol=1e-5)
    for a, b in zip(ref_grads, grads):
        torch.testing.assert_close(b, a, atol=2e-6, rtol=1e-5)


def test_without_restarting_positions_the_samples_would_see_each_other():
    # the test above can fail: one sequence of all samples scores sample 1 after sample 0's tokens
    model = _model("qwen2", "sdpa")
    ids, mask, completion = _padded(PROMPTS[:2], COMPLETIONS[:2])
    flat = flatten(PROMPTS[:2], COMPLETIONS[:2], ids.shape[1])
    flat["position_ids"] = torch.arange(flat["input_ids"].shape[1])[None]
    with torch.no_grad():
        got = padding_free_logprobs(model, flat, 2, ids.shape[1])
        ref = full_logprobs(model, ids, mask, completion)
    assert not torch.allclose(got[1], ref[1], atol=1e-4)


def test_only_packed_aware_attention_is_usable():
    assert usable(_model("qwen2", "sdpa"))
    model = _model("qwen2", "sdpa")
    model.config._attn_implementation = "pasodoble_grouped_sdpa"  # no mask from packed positions
    assert not usable(model)
    assert attention_for(torch.device("cpu")) == "sdpa"
    assert attention_for(torch.device("cuda")) in ("flash_attention_2", "flex_attention")


def test_an_attention_that_ignores_packed_positions_is_refused():
    model = _model("qwen2", "sdpa")
    model.config._attn_implementation = "pasodoble_grouped_sdpa"
    with pytest.raises(ValueError, match="does not mask packed sequences"):
        padding_free_logprobs(model, flatten([[1]], [[2]], 2), 1, 2)


@pytest.mark.parametrize("loss_type", ["dr_grpo", "dapo"])
def test_a_padding_free_role_update_equals_the_plain_one(loss_type):
    from tests.roles.test_roles import make_role, sampled

    flat = make_role(loss_type=loss_type, micro_batch_size=2)
    plain = make_role(loss_type=loss_type, share_prompt_prefill=False, micro_batch_size=2)
    assert not flat.padding_free  # a CPU keeps its layouts unless asked
    kept = flat.model.config._attn_implementation  # generation's, which the update leaves as it was
    assert flat.use_padding_free() and flat.update_attention == "sdpa"
    plain.model.set_attn_implementation("sdpa")  # the same attention kernels on both sides
    samples, adv = sampled(flat, ["1+1", "2+2", "33*3"])
    assert len(flat.micro_batch_plan(samples)) == 1 < len(plain.micro_batch_plan(samples))
    for _ in range(2):  # the second update's samples are a step old: ratios != 1 on both paths
        a, b = flat.update(samples, adv), plain.update(samples, adv)
        for key in (
            "loss",
            "grad_norm",
            "clip_fraction",
            "ratio_mean",
            "logprob_diff_mean",
            "logprob_diff_max",
        ):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key
        for x, y in zip(flat.model.parameters(), plain.model.parameters()):
            torch.testing.assert_close(x, y, atol=2e-5, rtol=0)
    assert flat.model.config._attn_implementation == kept


def test_a_padding_free_update_reads_back_at_most_twice():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from gpu_sections import profile_counts

    from tests.roles.test_roles import make_role, sampled

    role = make_role(micro_batch_tokens=24, micro_batch_size=2)  # several micro-batches
    assert role.use_padding_free()
    samples, adv = sampled(role, ["1+1", "2+2", "33*3"])
    micro_batches = len(role.micro_batch_plan(samples))
    assert micro_batches > 1
    role.update(samples, adv)
    _, syncs, in_step = profile_counts(lambda: role.update(samples, adv))
    # one flag a forward from transformers' packed-sequence detection, then one read of the statistics
    assert syncs["aten::_local_scalar_dense"] == micro_batches and syncs["aten::nonzero"] == 0
    assert syncs["pasodoble::read_back"] == 1
