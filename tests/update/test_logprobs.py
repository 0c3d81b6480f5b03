"""`update.logprobs`: one entry point whose layouts give the same log-probs, and the one temperature rule."""

from __future__ import annotations

import copy

import pytest
import torch

from pasodoble.accel import grouped_attention
from pasodoble.roles.role import collate
from pasodoble.update import fast_paths, segment_attention
from pasodoble.update.logprobs import LAYOUTS, logprobs, scored_temperature
from tests.update.test_shared_prefix import _samples


def test_greedy_is_scored_at_one_and_any_other_temperature_as_it_is():
    assert (
        scored_temperature(0.0) == 1.0 and scored_temperature(0.6) == 0.6 and scored_temperature(1.3) == 1.3
    )


def test_every_layout_gives_the_same_log_probs(tiny_lm):
    model, tokenizer, _ = tiny_lm
    model = copy.deepcopy(model)  # the fixture's model is shared: switch a copy
    assert grouped_attention.use_grouped_attention(model)  # the attention interface the packed layout reads
    samples = _samples(len(tokenizer))
    batch = collate(samples, tokenizer.pad_token_id)
    args = (model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    extra = dict(
        prompts=[s.prompt_ids for s in samples],
        completions=[s.completion.token_ids for s in samples],
        pad_id=tokenizer.pad_token_id,
    )
    flat = copy.deepcopy(model)
    flat.set_attn_implementation("sdpa")  # padding-free: transformers masks packed sequences
    with torch.no_grad():
        out = {
            layout: logprobs(
                flat if layout == "padding_free" else model,
                *args[1:],
                temperature=0.7,
                layout=layout,
                chunk_tokens=5,
                **extra,
            )  # fmt: skip
            for layout in LAYOUTS
        }
        greedy = logprobs(*args, temperature=0.0, layout="chunked", chunk_tokens=5)
        at_one = logprobs(*args, temperature=1.0, layout="full")
    for layout in LAYOUTS[1:]:
        torch.testing.assert_close(out[layout], out["full"], rtol=1e-4, atol=1e-5, msg=layout)
    assert not torch.equal(out["full"], at_one)  # the temperature is applied
    torch.testing.assert_close(greedy, at_one, rtol=1e-4, atol=1e-5)  # greedy is scored at 1, in every layout


def test_a_bad_layout_or_a_missing_sample_list_is_one_clear_error(tiny_lm):
    model, _, _ = tiny_lm
    ids = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(
        ValueError, match="unknown layout 'rows'; use one of full, chunked, shared_prefix, packed"
    ):
        logprobs(model, ids, ids, ids, layout="rows")
    with pytest.raises(ValueError, match="layout 'packed' takes prompts and completions"):
        logprobs(model, ids, ids, ids, layout="packed")


def test_the_accelerator_package_plugs_its_kernels_in_on_import():
    from pasodoble.accel import decode_kernel, narrow_matmul, train_attention

    assert fast_paths.train_attention is train_attention and fast_paths.decode is decode_kernel
    assert fast_paths.reuse_transposes is narrow_matmul.reuse_transposes
    assert (
        segment_attention.fast_paths is fast_paths
    )  # read at call time, so the plug-in reaches every caller
