"""Grouped-query SDPA without repeated key/value heads: the same values and gradients as transformers' SDPA path,
on padded batches, over a shared prompt's cache and in decoding; and which models it is used for."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM

from pasodoble.accel import train_attention
from pasodoble.accel.grouped_attention import GROUPED_SDPA, use_grouped_attention
from pasodoble.roles.role import Role, RoleConfig
from pasodoble.update.shared_prefix import shared_prompt_logprobs


def _pair(path):
    """The tiny model twice from its folder: stock SDPA and grouped."""
    stock, grouped = (AutoModelForCausalLM.from_pretrained(path) for _ in range(2))
    assert use_grouped_attention(grouped)
    assert grouped.config._attn_implementation == GROUPED_SDPA
    assert stock.config._attn_implementation == "sdpa"
    return stock, grouped


def _assert_same_values_and_gradients(path, loss) -> None:
    """`loss(model)` returns (values, scalar); both match between the stock and the grouped model."""
    out = []
    for model in _pair(path):
        values, total = loss(model)
        total.backward()
        out.append((values.detach(), [p.grad.clone() for p in model.parameters()]))
    (stock, stock_grads), (grouped, grouped_grads) = out
    torch.testing.assert_close(grouped, stock, atol=1e-5, rtol=1e-5)
    for a, b in zip(grouped_grads, stock_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_padded_forward_and_backward_match_the_stock_path(tiny_lm):
    _, tokenizer, path = tiny_lm
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, len(tokenizer), (3, 11), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding
    mask[1, 7:] = 0  # right padding
    weights = torch.randn(3, 11, len(tokenizer), generator=gen)

    def loss(model):
        logits = model(input_ids=ids, attention_mask=mask).logits
        return logits, (logits * weights * mask[..., None]).sum()

    _assert_same_values_and_gradients(path, loss)


def test_shared_prompt_logprobs_match_the_stock_path(tiny_lm):
    """The update's shared-prompt forward: a cache of prompt rows gathered per sample, completions on top."""
    _, tokenizer, path = tiny_lm
    gen = torch.Generator().manual_seed(4)
    prompt_a, prompt_b = (torch.randint(3, len(tokenizer), (n,), generator=gen).tolist() for n in (7, 3))
    prompts = [prompt_a, prompt_a, prompt_b, prompt_b]
    completions = [torch.randint(3, len(tokenizer), (n,), generator=gen).tolist() for n in (5, 2, 6, 1)]

    def loss(model):
        logps = shared_prompt_logprobs(model, prompts, completions, 13, pad_id=tokenizer.pad_token_id)
        return logps, logps.sum()

    _assert_same_values_and_gradients(path, loss)


def test_grouped_heads_reach_sdpa_unrepeated(tiny_lm, monkeypatch):
    """The grouped model's padded forward calls SDPA with fewer key heads than query heads; the stock one never.
    (With the compiled attention kernel off: with one torch thread it serves these calls instead of SDPA.)"""
    _, tokenizer, path = tiny_lm
    monkeypatch.setitem(train_attention._state, "lib", None)
    monkeypatch.setitem(train_attention._state, "why", "off (test)")
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, *args, **kwargs):
        calls.append((query.shape[1], key.shape[1], kwargs.get("enable_gqa", False)))
        return sdpa(query, key, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    ids = torch.randint(3, len(tokenizer), (2, 9), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    grouped_calls = {}
    models = _pair(path)
    for name, model in zip(("stock", "grouped"), models):
        calls.clear()
        model(input_ids=ids, attention_mask=mask)
        grouped_calls[name] = [c for c in calls if c[2] and c[1] < c[0]]
        assert calls  # every layer went through SDPA
    assert len(grouped_calls["grouped"]) == models[1].config.num_hidden_layers
    assert grouped_calls["stock"] == []


def test_decoding_scores_are_unchanged(tiny_lm):
    """Greedy decoding of a padded batch: the same tokens and the same logits at every step (prefill and decode)."""
    _, tokenizer, path = tiny_lm
    stock, grouped = _pair(path)
    prompt = torch.tensor([[5, 9, 14, 3, 22], [0, 0, 7, 8, 9]])
    mask = (prompt != 0).long()
    runs = [
        m.generate(
            input_ids=prompt,
            attention_mask=mask,
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=0,
            output_logits=True,
            return_dict_in_generate=True,
        )  # fmt: skip
        for m in (stock, grouped)
    ]
    assert torch.equal(runs[0].sequences, runs[1].sequences)
    for a, b in zip(runs[0].logits, runs[1].logits):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


def test_other_devices_take_the_stock_path(monkeypatch):
    """A model moved off the CPU after loading: its calls go to transformers' SDPA (CUDA refuses masked grouped
    calls in its fused kernels)."""
    from pasodoble.accel import grouped_attention

    seen = []
    monkeypatch.setattr(
        grouped_attention, "sdpa_attention_forward", lambda *a, **k: seen.append(a[1].device.type)
    )
    query, key = torch.empty(1, 4, 3, 8, device="meta"), torch.empty(1, 2, 3, 8, device="meta")
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool, device="meta")
    grouped_attention.grouped_sdpa_forward(torch.nn.Module(), query, key, key, mask)
    assert seen == ["meta"]


def test_used_only_for_grouped_heads_on_sdpa(tiny_lm):
    _, _, path = tiny_lm
    eager = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    assert not use_grouped_attention(eager)
    assert eager.config._attn_implementation == "eager"
    heads = LlamaConfig(
        vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2,
    )  # fmt: skip
    plain = LlamaForCausalLM(heads)
    assert not use_grouped_attention(plain)
    assert plain.config._attn_implementation == "sdpa"
    # grouped heads, but an architecture outside ARCHITECTURES: its code may branch on the name "sdpa"
    other = Phi3ForCausalLM(
        Phi3Config(
            vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, pad_token_id=0,
        )
    )  # fmt: skip
    assert other.config._attn_implementation == "sdpa"
    assert not use_grouped_attention(other)
    assert other.config._attn_implementation == "sdpa"


def test_the_saved_config_keeps_no_trace(tiny_lm, tmp_path):
    """A checkpoint of a switched model loads anywhere: the implementation is not written to config.json."""
    _, _, path = tiny_lm
    model = AutoModelForCausalLM.from_pretrained(path)
    assert use_grouped_attention(model)
    model.save_pretrained(tmp_path)
    assert GROUPED_SDPA not in (tmp_path / "config.json").read_text()
    assert AutoModelForCausalLM.from_pretrained(tmp_path).config._attn_implementation == "sdpa"


def test_the_role_loads_models_with_it(tiny_lm):
    _, _, path = tiny_lm
    role = Role.from_pretrained("solver", RoleConfig(model=str(path), device="cpu"), path)
    assert role.model.config._attn_implementation == GROUPED_SDPA
