"""Liger's fused GRPO loss as a role's loss (`loss_kernel: liger`, `pasodoble.update.liger`): updates with it give
the project's loss, statistics, gradients and updated parameters for each loss type the project has (dr_grpo, grpo,
dapo; Liger has all three), in float32 on a CPU through Liger's chunked loss without Triton; a control shows the
comparison can fail; where it cannot run, one clear line."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from pasodoble.config import validate_tree
from pasodoble.errors import ConfigError
from pasodoble.roles import adapters
from pasodoble.roles.config import LoraConfig
from pasodoble.roles.role import Role, RoleConfig, Sample, collate
from pasodoble.rollout import Completion
from pasodoble.scale.sharding import check_roles
from pasodoble.update import liger
from pasodoble.update.logprobs import full_logprobs
from tests.loop_helpers import make_tokenizer

needs_liger = pytest.mark.skipif(
    liger.liger_unavailable() is not None,
    reason="liger-kernel is not importable (make install adds it without Triton; or pip install 'pasodoble[liger]')",
)
COMPLETION = 10  # max_completion_length: the completions below are 1 to 10 tokens, so the loss types differ
# float32 on a CPU: the two paths differ by summation order (Liger's online softmax, its per-row chunks)
GRAD_TOL = {"atol": 1e-6, "rtol": 1e-4}
LR = 1e-3


def _model(arch: str, tokenizer) -> torch.nn.Module:
    torch.manual_seed(0)
    sizes = dict(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )  # fmt: skip
    if arch == "qwen2":  # an untied head
        return Qwen2ForCausalLM(Qwen2Config(**sizes, tie_word_embeddings=False))
    return LlamaForCausalLM(LlamaConfig(**sizes, tie_word_embeddings=True))  # the head is the input embedding


def _role(arch: str, **overrides) -> tuple[Role, list[list[torch.Tensor]]]:
    """A role and the gradients its optimizer steps on (one list a step)."""
    tokenizer = make_tokenizer()
    fields = dict(
        model="test", num_generations=2, temperature=0.8, max_completion_length=COMPLETION, lr=LR,
        micro_batch_size=3, max_grad_norm=None,
        # the same micro-batches on both sides: a statistic is a weighted mean of per-micro-batch means
        share_prompt_prefill=False,
    )  # fmt: skip
    cfg = RoleConfig(**{**fields, **overrides})
    model = _model(arch, tokenizer)
    if cfg.lora is not None:  # the adapters train; the head (frozen) still goes to Liger
        model = adapters.wrap_lora(model, "solver", cfg.lora)
    role = Role("solver", cfg, model, tokenizer)
    grads: list[list[torch.Tensor]] = []
    role.optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: grads.append([p.grad.clone() for p in role.model.parameters()])
    )
    return role, grads


def _samples(role: Role, seed: int = 1) -> tuple[list[Sample], list[float]]:
    """Eight samples of 1-10 completion tokens whose engine log-probs are the model's own plus noise (ratios
    around 1, some clipped), from an earlier policy version (the ratio is taken against them)."""
    g = torch.Generator().manual_seed(seed)
    vocab = len(role.tokenizer)
    prompts = [
        torch.randint(3, vocab, (int(n),), generator=g).tolist()
        for n in torch.randint(2, 6, (8,), generator=g)
    ]
    lengths = [1, 10, 4, 7, 2, 10, 5, 3]
    completions = [torch.randint(3, vocab, (n,), generator=g).tolist() for n in lengths]
    draft = [Sample(p, Completion("", c, [0.0] * len(c), "length")) for p, c in zip(prompts, completions)]
    batch = collate(draft, role.tokenizer.pad_token_id)
    with torch.no_grad():
        scale = 1.0 / role.cfg.temperature
        logps = full_logprobs(role.model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"],
                              temperature=role.cfg.temperature)  # fmt: skip
    noisy = logps + 0.15 * scale * torch.randn(logps.shape, generator=g)
    samples = []
    for b, (p, c) in enumerate(zip(prompts, completions)):
        engine = noisy[b, len(p) : len(p) + len(c)].tolist()
        samples.append(Sample(p, Completion("", c, engine, "length", policy_version=-1)))
    advantages = torch.randn(len(samples), generator=g).tolist()
    return samples, advantages


def _updates(arch: str, steps: int = 2, **overrides):
    """{kernel: (stats of each update, gradients of each step, parameters after)} of `steps` updates on the same
    samples by the project's loss and Liger's (from the second on, the policy has moved from the reference)."""
    out = {}
    samples = None
    for kernel in ("pasodoble", "liger"):
        role, grads = _role(arch, **overrides, loss_kernel=kernel)
        if samples is None:
            samples, advantages = _samples(role)
        stats = [role.update(samples, advantages) for _ in range(steps)]
        out[kernel] = (stats, grads, [p.detach().clone() for p in role.model.parameters()])
    return out


@needs_liger
@pytest.mark.parametrize(
    ("arch", "settings"),
    [
        ("qwen2", {"loss_type": "dr_grpo"}),
        ("qwen2", {"loss_type": "grpo", "epsilon_high": 0.28}),
        ("qwen2", {"loss_type": "dapo", "beta": 0.04}),
        ("llama", {"loss_type": "dr_grpo", "beta": 0.04, "epsilon": 0.1}),
        ("qwen2", {"loss_type": "dapo", "num_iterations": 2}),
        ("qwen2", {"loss_type": "grpo", "lora": LoraConfig(rank=4)}),
    ],
)
def test_updates_with_liger_equal_the_project_s_loss(arch, settings):
    out = _updates(arch, **settings)
    (ours, our_grads, our_params), (theirs, grads, params) = out["pasodoble"], out["liger"]
    assert 0.0 < ours[0]["clip_fraction"] < 1.0  # the clipped and the unclipped branches both take part
    keys = ("loss", "clip_fraction", "grad_norm", *(("kl",) if settings.get("beta") else ()))
    for step, (a, b) in enumerate(zip(ours, theirs)):
        for key in keys:
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), (step, key)
        # Liger returns no per-token log-probs: the engine/trainer gap and the ratio's mean are not logged
        assert {"logprob_diff_mean", "logprob_diff_max", "ratio_mean"} <= set(a) - set(b)
    assert not settings.get("beta") or ours[1]["kl"] > 1e-6  # the second update's KL term is not zero
    for step_ours, step_theirs in zip(our_grads, grads, strict=True):
        for a, b in zip(step_ours, step_theirs):
            torch.testing.assert_close(b, a, **GRAD_TOL)
    # Adam's first steps are ~lr * sign(g): an entry whose gradient is float noise may move by up to ~lr
    for a, b in zip(our_params, params):
        torch.testing.assert_close(b, a, atol=LR * 1e-2, rtol=0)


@needs_liger
def test_the_comparison_fails_for_another_clip_range():
    ours = _updates("qwen2", steps=1, loss_type="dr_grpo")["pasodoble"]
    theirs = _updates("qwen2", steps=1, loss_type="dr_grpo", epsilon=0.05)["liger"]
    assert ours[0][0]["clip_fraction"] < theirs[0][0]["clip_fraction"]
    with pytest.raises(AssertionError):
        for a, b in zip(ours[1][0], theirs[1][0]):
            torch.testing.assert_close(b, a, **GRAD_TOL)


@needs_liger
def test_a_liger_role_runs_padded_rows_on_every_device():
    role, _ = _role("qwen2", loss_kernel="liger", share_prompt_prefill=True)
    samples, _ = _samples(role)
    plan, packed = role.micro_batch_layout(samples)
    assert not packed and not role.use_padding_free() and sorted(sum(plan, [])) == list(range(len(samples)))
    assert not role.liger.compiled  # the loss math is compiled on CUDA only


@needs_liger
def test_a_dual_play_step_trains_both_roles_with_liger(tmp_path):
    from tests.loop.test_dualplay import changed, make_loop, params

    loop = make_loop(tmp_path, role_cfg={"loss_kernel": "liger"})
    assert loop.proposer.liger is not None and loop.solver.liger is not None
    p0, s0 = params(loop.proposer), params(loop.solver)
    row = loop.online_step()
    assert row["proposer/update/applied"] == row["solver/update/applied"] == 1.0
    assert changed(p0, loop.proposer) and changed(s0, loop.solver)
    assert 0.0 <= row["solver/update/clip_fraction"] <= 1.0 and row["solver/update/grad_norm"] > 0
    assert not any("logprob_diff" in key for key in row)  # not measured, rather than logged as 0


def test_asking_for_liger_where_it_is_not_installed_is_one_line(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        ConfigError, match=r"^solver.loss_kernel: liger-kernel is not installed; pip install"
    ) as e:
        validate_tree(RoleConfig(loss_kernel="liger"), "solver")
    assert "\n" not in str(e.value) and "set it to pasodoble" in str(e.value)
    RoleConfig().validate()  # the project's own loss needs nothing


def test_settings_liger_lacks_are_refused_before_loading(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # as if installed
    with pytest.raises(ConfigError, match=r"^tis_cap: .*Liger's fused loss .* does not return"):
        RoleConfig(loss_kernel="liger", tis_cap=2.0).validate()
    with pytest.raises(ConfigError, match=r"^loss_kernel: unknown 'triton'; use one of pasodoble, liger"):
        RoleConfig(loss_kernel="triton").validate()
    roles = {"solver": RoleConfig(loss_kernel="liger")}
    check_roles("ddp", 1, roles)  # one process
    with pytest.raises(
        ConfigError, match=r"^solver.loss_kernel: liger runs on one process, this launch has 2"
    ):
        check_roles("ddp", 2, roles)
    check_roles("ddp", 2, {"solver": RoleConfig(loss_kernel="liger", trainable=False)})  # no loss to compute


@pytest.mark.gpu
@needs_liger
def test_liger_s_loss_is_compiled_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device is visible")
    tokenizer = make_tokenizer()
    model = _model("qwen2", tokenizer).cuda()
    role = Role("solver", RoleConfig(model="test", loss_kernel="liger", device="cuda"), model, tokenizer)
    assert role.liger.compiled and not role.padding_free
