"""Token budgets from a model's shape (`update.token_budget`) and `micro_batch_tokens` / `logprob_chunk_tokens: auto`."""

from __future__ import annotations

import pytest

from pasodoble.config import apply_override, from_dict
from pasodoble.errors import ConfigError
from pasodoble.roles.role import RoleConfig, Sample, gradient_checkpointing, token_budgets
from pasodoble.rollout import Completion
from pasodoble.scale.layout import DistributedConfig, checkpointing_choice, role_memory_gb
from pasodoble.update.micro_batches import plan_micro_batches
from pasodoble.update.token_budget import (
    ACTIVATION_FLOOR_BYTES,
    activation_target,
    auto_logprob_chunk_tokens,
    auto_micro_batch_tokens,
    host_memory_bytes,
    needs_checkpointing,
    padding_free_target,
    token_activation_bytes,
)
from tests.roles.test_roles import make_role

SMOLLM2 = dict(hidden=576, intermediate=1536, layers=30)
SMOLLM2_PARAMS = 134_515_008
TINY = dict(hidden=96, intermediate=256, layers=4)


def test_the_budgets_land_where_the_hand_tuned_ones_measured_best():
    # docs/PERFORMANCE.md: 2048 tokens on the tiny anchor; 640 tokens and 512-token chunks on SmolLM2-135M (the
    # auto budgets are one 64-token step from the hand-tuned ones)
    assert auto_micro_batch_tokens(**TINY, state_bytes=16 * 400_000) == 2112
    assert auto_micro_batch_tokens(**SMOLLM2, state_bytes=16 * SMOLLM2_PARAMS) == 576
    assert auto_logprob_chunk_tokens(vocab=49_152, state_bytes=16 * SMOLLM2_PARAMS) == 512
    assert auto_logprob_chunk_tokens(vocab=320, state_bytes=16 * 400_000) == 2048


def test_the_activations_of_an_auto_budget_fit_the_target_and_one_more_step_would_not():
    for sizes, state in (
        (TINY, 1e6),
        (SMOLLM2, 16 * SMOLLM2_PARAMS),
        (dict(hidden=1024, intermediate=3072, layers=28), 9.6e9),
    ):
        for checkpointing in (False, True):
            budget = auto_micro_batch_tokens(**sizes, state_bytes=state, checkpointing=checkpointing)
            per_token = token_activation_bytes(**sizes, checkpointing=checkpointing)
            target = max(ACTIVATION_FLOOR_BYTES, 0.4 * state)
            assert budget % 64 == 0
            assert budget * per_token <= target < (budget + 64) * per_token


def test_on_an_accelerator_a_small_model_gets_a_fifth_of_the_device_and_a_large_one_its_state_share():
    qwen3_06b = dict(hidden=1024, intermediate=3072, layers=28)
    h200 = 143_771 * 2**20  # bytes
    # a trained role counts float32 activations whatever its dtype (autocast over float32 master weights)
    cpu = auto_micro_batch_tokens(**qwen3_06b, state_bytes=16 * 596e6, value_bytes=4)
    gpu = auto_micro_batch_tokens(**qwen3_06b, state_bytes=16 * 596e6, value_bytes=4, device_bytes=h200)
    assert cpu == 1472
    assert gpu == 11904  # 3 micro-batches of the GPU bench's 128 samples (its first run took 12, at 3,008)
    per_token = token_activation_bytes(**qwen3_06b, value_bytes=4)
    assert gpu * per_token <= 0.2 * h200 < (gpu + 64) * per_token and gpu > 3 * cpu
    # a model whose state share is already above a tenth of the device keeps it
    big = dict(hidden=4096, intermediate=12288, layers=36)
    assert auto_micro_batch_tokens(**big, state_bytes=16 * 8e9, device_bytes=80e9) == auto_micro_batch_tokens(
        **big, state_bytes=16 * 8e9
    )


def test_a_role_on_a_cpu_reads_no_device_memory():
    import torch

    from pasodoble.roles.role import device_memory

    assert device_memory(torch.nn.Linear(4, 4)) is None
    assert device_memory(torch.nn.Module()) is None  # no parameters


def test_checkpointing_and_half_precision_buy_a_larger_budget_and_a_larger_model_state_too():
    plain = auto_micro_batch_tokens(**SMOLLM2, state_bytes=16 * SMOLLM2_PARAMS)
    assert auto_micro_batch_tokens(**SMOLLM2, state_bytes=16 * SMOLLM2_PARAMS, checkpointing=True) > 4 * plain
    assert (
        auto_micro_batch_tokens(**SMOLLM2, state_bytes=16 * SMOLLM2_PARAMS, value_bytes=2) >= 2 * plain - 64
    )
    assert auto_micro_batch_tokens(**SMOLLM2, state_bytes=32 * SMOLLM2_PARAMS) >= 2 * plain - 64
    # a large vocabulary gets a smaller chunk; a huge model still never passes the fixed default
    assert auto_logprob_chunk_tokens(vocab=151_936, state_bytes=16 * SMOLLM2_PARAMS) < 512
    assert auto_logprob_chunk_tokens(vocab=151_936, state_bytes=16 * 8e9) == 2048


def test_a_model_too_large_for_its_floor_still_gets_one_step_of_tokens():
    assert auto_micro_batch_tokens(hidden=8192, intermediate=28672, layers=80, state_bytes=0) == 64
    assert auto_logprob_chunk_tokens(vocab=10**9, state_bytes=0) == 64
    with pytest.raises(ValueError, match="positive model sizes"):
        auto_micro_batch_tokens(hidden=0, intermediate=1, layers=1, state_bytes=1)
    with pytest.raises(ValueError, match="vocab"):
        auto_logprob_chunk_tokens(vocab=0, state_bytes=1)


def test_auto_is_accepted_by_the_config_and_a_misspelling_is_a_config_error():
    data = {"model": "m"}
    apply_override(data, "micro_batch_tokens=auto")
    apply_override(data, "logprob_chunk_tokens=auto")
    cfg = from_dict(RoleConfig, data, "solver")
    cfg.validate()
    assert (cfg.micro_batch_tokens, cfg.logprob_chunk_tokens) == ("auto", "auto")
    for key in ("micro_batch_tokens", "logprob_chunk_tokens"):
        with pytest.raises(ConfigError, match=key):
            from_dict(RoleConfig, {"model": "m", key: "automatic"}, "solver")
        with pytest.raises(ConfigError, match=key):
            RoleConfig(model="m", **{key: "2048"}).validate()


def test_a_role_resolves_auto_from_its_model_and_plans_by_the_resolved_budget():
    role = make_role(micro_batch_tokens="auto", logprob_chunk_tokens="auto", micro_batch_size=1)
    config = role.model.config
    params = sum(p.numel() for p in role.model.parameters())
    expected = auto_micro_batch_tokens(
        hidden=config.hidden_size,
        intermediate=config.intermediate_size,
        layers=config.num_hidden_layers,
        state_bytes=16 * params,
    )
    assert role.micro_batch_tokens == expected
    assert role.logprob_chunk_tokens == auto_logprob_chunk_tokens(
        vocab=config.vocab_size, state_bytes=16 * params
    )
    prompt = role.prompt_ids([{"role": "user", "content": "1+1"}])
    samples = [Sample(prompt, Completion("", [10] * 5, [-1.0] * 5, "stop")) for _ in range(6)]
    # micro_batch_size=1 alone would give six micro-batches; the resolved budget holds all six samples in one
    plan, packed = role.micro_batch_layout(samples)
    assert plan == plan_micro_batches(
        [prompt] * 6,
        [5] * 6,
        1,
        share=True,
        packed=packed,
        line=packed,
        max_tokens=expected,
        micro_batch_cost=role.micro_batch_cost,
    )
    assert len(role.micro_batch_plan(samples)) == 1
    fixed = make_role(micro_batch_tokens=24, logprob_chunk_tokens=None)
    assert (fixed.micro_batch_tokens, fixed.logprob_chunk_tokens) == (24, None)


def test_a_model_without_the_sizes_falls_back_to_sequences_and_the_default_chunk():
    import torch

    cfg = RoleConfig(model="m", micro_batch_tokens="auto", logprob_chunk_tokens="auto")
    assert token_budgets(cfg, torch.nn.Linear(4, 4)) == (None, 2048)


def test_the_layout_estimate_resolves_auto_as_the_role_does():
    arch = {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49_152,
        "tie_word_embeddings": True,
    }
    fixed = RoleConfig(model="m", max_prompt_length=64, max_completion_length=64, micro_batch_tokens=576)
    auto = RoleConfig(model="m", max_prompt_length=64, max_completion_length=64, micro_batch_tokens="auto")
    dist = DistributedConfig()
    assert role_memory_gb(arch, auto, dist, 1)["activations"] == pytest.approx(
        role_memory_gb(arch, fixed, dist, 1)["activations"]
    )
    # on an 80 GB GPU the estimate takes the larger budget the Role would take there
    on_gpu = auto_micro_batch_tokens(
        hidden=576, intermediate=1536, layers=30, state_bytes=16 * SMOLLM2_PARAMS, device_bytes=80e9
    )
    larger = RoleConfig(model="m", max_prompt_length=64, max_completion_length=64, micro_batch_tokens=on_gpu)
    assert role_memory_gb(arch, auto, dist, 1, gpu_gb=80)["activations"] == pytest.approx(
        role_memory_gb(arch, larger, dist, 1)["activations"]
    )


def test_a_trained_role_in_bfloat16_counts_float32_activations():
    """Autocast over float32 master weights keeps float32 activations beside the bfloat16 copies: the budget of
    `dtype: bfloat16` is float32's. Weights stored in bfloat16 (nothing to autocast) count 2 bytes."""
    import copy

    import torch

    role = make_role()
    fp32 = RoleConfig(model="m", dtype="float32", micro_batch_tokens="auto", logprob_chunk_tokens="auto")
    bf16 = RoleConfig(model="m", dtype="bfloat16", micro_batch_tokens="auto", logprob_chunk_tokens="auto")
    tokens, _ = token_budgets(fp32, role.model)
    assert token_budgets(bf16, role.model)[0] == tokens
    stored = copy.deepcopy(role.model).to(torch.bfloat16).requires_grad_(False)
    assert token_budgets(bf16, stored)[0] > tokens


QWEN3_1_7B = dict(hidden=2048, intermediate=6144, layers=28)


def test_auto_checkpointing_turns_on_only_where_the_activations_do_not_fit_half_the_device():
    # Qwen3-1.7B, float32 AdamW (27.2 GB) and one 6,656-token sequence with every layer's activations (33.6 GB)
    state, one_sequence = 16 * 1.7e9, 512 + 6144
    assert needs_checkpointing(**QWEN3_1_7B, tokens=one_sequence, state_bytes=state, device_bytes=80e9)
    assert not needs_checkpointing(**QWEN3_1_7B, tokens=one_sequence, state_bytes=state, device_bytes=141e9)
    assert not needs_checkpointing(**QWEN3_1_7B, tokens=1024, state_bytes=state, device_bytes=80e9)
    per_token = token_activation_bytes(**QWEN3_1_7B)
    edge = int(
        (0.5 * 80e9 - state) // per_token
    )  # the most tokens that fit beside the state in half of 80 GB
    assert not needs_checkpointing(**QWEN3_1_7B, tokens=edge, state_bytes=state, device_bytes=80e9)
    assert needs_checkpointing(**QWEN3_1_7B, tokens=edge + 1, state_bytes=state, device_bytes=80e9)


def test_on_a_cpu_auto_checkpointing_reads_the_host_memory():
    per_token = token_activation_bytes(**TINY)
    fits = int(0.5 * host_memory_bytes() // per_token)
    assert not needs_checkpointing(**TINY, tokens=fits - 1, state_bytes=0)
    assert needs_checkpointing(**TINY, tokens=fits + 1, state_bytes=0)


def test_the_role_and_the_layout_resolve_auto_checkpointing_alike():
    """A role with `gradient_checkpointing: auto` on a CPU keeps it off at its own shape and turns it on only for a
    micro-batch past the host's memory; the layout's estimate from config.json makes the same choice."""
    role = make_role(gradient_checkpointing="auto")
    assert role.gradient_checkpointing is False and not role.model.is_activation_checkpointing
    config = role.model.config
    arch = {
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": config.head_dim,
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": True,
        "model_type": "qwen3",
    }
    sizes = dict(
        hidden=config.hidden_size, intermediate=config.intermediate_size, layers=config.num_hidden_layers
    )
    sequence = role.cfg.max_sequence_length
    past_host = int(host_memory_bytes() // (token_activation_bytes(**sizes) * sequence)) + 1
    for batch, on in [(role.cfg.micro_batch_size, False), (past_host, True)]:
        cfg = RoleConfig(
            model="m", max_completion_length=8, micro_batch_size=batch, gradient_checkpointing="auto"
        )
        assert gradient_checkpointing(cfg, role.model) is on
        assert checkpointing_choice(arch, cfg, None) is on
    for fixed in (True, False):  # true and false stay what they say
        cfg = RoleConfig(model="m", micro_batch_size=past_host, gradient_checkpointing=fixed)
        assert (
            gradient_checkpointing(cfg, role.model) is fixed and checkpointing_choice(arch, cfg, 80) is fixed
        )
    frozen = RoleConfig(model="m", micro_batch_size=past_host, gradient_checkpointing="auto", trainable=False)
    assert gradient_checkpointing(frozen, role.model) is False  # no backward


def test_the_padding_free_budget_takes_half_the_device_less_the_state_and_nothing_more_on_a_cpu():
    gb = 1e9
    # Qwen3-0.6B-sized: 0.6B parameters x 16 bytes of state on a 141 GB device
    state = 0.6e9 * 16
    assert padding_free_target(state, 141 * gb) == pytest.approx(0.5 * 141 * gb - state)
    assert padding_free_target(state, 141 * gb) > activation_target(state, 141 * gb)
    # a state past half the device keeps the plain target; a CPU keeps the state's share
    assert padding_free_target(100 * gb, 141 * gb) == activation_target(100 * gb, 141 * gb)
    assert padding_free_target(state) == activation_target(state)
    sizes = dict(hidden=1024, intermediate=3072, layers=28, state_bytes=state, device_bytes=141 * gb)
    assert auto_micro_batch_tokens(**sizes, padding_free=True) > 2 * auto_micro_batch_tokens(**sizes)
