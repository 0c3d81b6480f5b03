"""GRPO tensors: advantages, token log-probs on a real tiny Qwen3, and the loss variants on hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from pasodoble.core.grpo import entropy_from_logits, group_advantages, policy_loss
from pasodoble.update.logprobs import logprobs


def test_group_advantages_hand_computed_sample_std():
    # rewards 0.8, 0, 0.3, 0, 0, 0.3: mean 1.4/6 = 0.2333333
    # squared deviations 0.3211111 + 3 * 0.0544444 + 2 * 0.0044444 = 0.4933333
    # sample std sqrt(0.4933333 / 5) = 0.3141125; + 1e-4 = 0.3142125
    adv = group_advantages(torch.tensor([0.8, 0.0, 0.3, 0.0, 0.0, 0.3]))
    expected = [0.5666667 / 0.3142125, -0.2333333 / 0.3142125, 0.0666667 / 0.3142125]
    assert adv[:3].tolist() == pytest.approx(expected, abs=1e-5)
    assert adv.tolist()[3:] == pytest.approx([expected[1], expected[1], expected[2]], abs=1e-5)


def test_group_advantages_population_std_option():
    # population std sqrt(0.4933333 / 6) = 0.2867442; + 1e-4 = 0.2868442
    adv = group_advantages(torch.tensor([0.8, 0.0, 0.3, 0.0, 0.0, 0.3]), unbiased=False)
    assert adv[0].item() == pytest.approx(0.5666667 / 0.2868442, abs=1e-5)


def test_group_advantages_edge_cases():
    assert group_advantages(torch.tensor([0.3, 0.3, 0.3])).tolist() == [0.0, 0.0, 0.0]  # no signal, no NaN
    assert group_advantages(torch.tensor([0.8] * 6)).tolist() == [0.0] * 6  # exactly 0, not float noise / eps
    assert group_advantages(torch.tensor([0.7])).tolist() == [0.0]  # one sample: no group baseline
    # [1, 0]: mean 0.5, sample std sqrt(0.5) = 0.7071068 -> +-0.5 / 0.7072068
    assert group_advantages(torch.tensor([1.0, 0.0])).tolist() == pytest.approx(
        [0.7070068, -0.7070068], abs=1e-6
    )
    # population std 0.5 -> +-0.5 / 0.5001
    pop = group_advantages(torch.tensor([1.0, 0.0]), unbiased=False)
    assert pop.tolist() == pytest.approx([0.9998000, -0.9998000], abs=1e-6)


def _loss(logps, old, adv, mask, **kw):
    kw.setdefault("max_completion_length", 4)
    return policy_loss(torch.tensor(logps), torch.tensor(old), torch.tensor(adv), torch.tensor(mask), **kw)


LOGPS = [[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]]
MASK = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]


@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [
        # ratio 1 everywhere, per-token loss -A: row 0 [-1, -1], row 1 [1, 1, 1]; masked sum -2 + 3 = 1
        ("dr_grpo", 0.125),  # 1 / (B=2 * max_completion_length=4)
        ("grpo", 0.0),  # mean(-2/2, 3/3)
        ("dapo", 0.2),  # 1 / 5 tokens
    ],
)
def test_loss_normalisations(loss_type, expected):
    loss, stats = _loss(LOGPS, LOGPS, [1.0, -1.0], MASK, loss_type=loss_type)
    assert loss.item() == pytest.approx(expected)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    assert stats["clip_fraction"] == 0.0


def test_unknown_loss_type():
    with pytest.raises(ValueError, match="loss_type"):
        _loss(LOGPS, LOGPS, [1.0, -1.0], MASK, loss_type="ppo")


@pytest.mark.parametrize(
    ("log_ratio", "adv", "token_loss", "clipped"),
    [
        (0.5, 1.0, -1.2, True),  # ratio e^0.5 = 1.6487 > 1.2, A > 0: clipped to -1.2
        (0.5, -1.0, 1.6487213, False),  # A < 0: min(-1.6487, -1.2) = -1.6487, unclipped
        (-0.5, 1.0, -0.6065307, False),  # ratio e^-0.5 = 0.6065, A > 0: min(0.6065, 0.8), unclipped
        (-0.5, -1.0, 0.8, True),  # A < 0: min(-0.6065, -0.8) = -0.8, clipped
        (0.1, 2.0, -2.2103418, False),  # ratio e^0.1 = 1.1051709 inside [0.8, 1.2]: -2 * 1.1051709
    ],
)
def test_clipping(log_ratio, adv, token_loss, clipped):
    logps = torch.tensor([[log_ratio]], requires_grad=True)
    loss, stats = policy_loss(
        logps,
        torch.zeros(1, 1),
        torch.tensor([adv]),
        torch.ones(1, 1),
        loss_type="dapo",
        max_completion_length=1,
    )
    assert loss.item() == pytest.approx(token_loss, abs=1e-6)
    assert stats["clip_fraction"] == (1.0 if clipped else 0.0)
    loss.backward()
    assert (logps.grad.item() == 0.0) is clipped  # a clipped token passes no gradient


def test_asymmetric_clip_high():
    # ratio e^0.25 = 1.2840254, A = 1: eps_high 0.28 clips to 1.28; symmetric 0.2 clips to 1.2
    args = (torch.tensor([[0.25]]), torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1))
    high, _ = policy_loss(*args, epsilon_high=0.28, loss_type="dapo", max_completion_length=1)
    sym, _ = policy_loss(*args, loss_type="dapo", max_completion_length=1)
    assert (high.item(), sym.item()) == pytest.approx((-1.28, -1.2))


def test_gradient_sign_follows_advantage():
    logps = torch.tensor([[-1.0, -1.0], [-1.0, -1.0]], requires_grad=True)
    loss, _ = policy_loss(
        logps, logps.detach().clone(), torch.tensor([2.0, -1.0]), torch.ones(2, 2), max_completion_length=2
    )
    loss.backward()
    # dr_grpo: d loss / d logp = -A * ratio / (B * L) = -A / 4
    assert logps.grad.flatten().tolist() == pytest.approx([-0.5, -0.5, 0.25, 0.25])


def test_kl_term():
    logps = torch.tensor([[-1.0, -2.0]])
    args = dict(loss_type="dapo", max_completion_length=2)
    base, _ = policy_loss(logps, logps, torch.tensor([1.0]), torch.ones(1, 2), **args)
    same, stats = policy_loss(
        logps, logps, torch.tensor([1.0]), torch.ones(1, 2), ref_logps=logps, beta=0.1, **args
    )
    assert same.item() == pytest.approx(base.item()) and stats["kl"] == 0.0
    # ref - logp = ln 2 on both tokens: k3 = e^{ln 2} - ln 2 - 1 = 2 - 0.6931472 - 1 = 0.3068528
    ref = logps + math.log(2.0)
    with_kl, stats = policy_loss(
        logps, logps, torch.tensor([1.0]), torch.ones(1, 2), ref_logps=ref, beta=0.1, **args
    )
    assert stats["kl"] == pytest.approx(0.3068528, abs=1e-6)
    assert with_kl.item() == pytest.approx(-1.0 + 0.1 * 0.3068528, abs=1e-6)  # dapo mean of -1 + beta * k3
    with pytest.raises(ValueError, match="ref_logps"):
        policy_loss(logps, logps, torch.tensor([1.0]), torch.ones(1, 2), beta=0.1, **args)


def test_entropy_from_logits():
    uniform = torch.zeros(3, 4)
    assert entropy_from_logits(uniform).tolist() == pytest.approx([math.log(4)] * 3)  # ln 4 = 1.3862944
    assert entropy_from_logits(torch.tensor([[0.0, -1e9]])).item() == pytest.approx(0.0, abs=1e-6)


def _batch(tokenizer):
    prompt = tokenizer("ab", add_special_tokens=False)["input_ids"]
    completions = [
        tokenizer("cde", add_special_tokens=False)["input_ids"],
        tokenizer("f", add_special_tokens=False)["input_ids"],
    ]
    rows = [prompt + c for c in completions]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    completion = torch.zeros_like(attention)
    for i, c in enumerate(completions):
        completion[i, len(prompt) : len(prompt) + len(c)] = 1
    return input_ids, attention, completion


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_match_manual_log_softmax(tiny_lm, temperature):
    model, tokenizer, _ = tiny_lm
    input_ids, attention, completion = _batch(tokenizer)
    with torch.no_grad():
        out = logprobs(model, input_ids, attention, completion, temperature=temperature)
        logits = model(input_ids=input_ids, attention_mask=attention).logits
    assert out.shape == input_ids.shape
    logp = torch.log_softmax(logits / temperature, dim=-1)
    for b in range(input_ids.shape[0]):
        for t in range(input_ids.shape[1]):
            expected = logp[b, t - 1, input_ids[b, t]].item() if t > 0 and completion[b, t] else 0.0
            assert out[b, t].item() == pytest.approx(expected, abs=1e-5)


def test_token_logprobs_entropy_and_greedy(tiny_lm):
    model, tokenizer, _ = tiny_lm
    input_ids, attention, completion = _batch(tokenizer)
    with torch.no_grad():
        logps, entropy = logprobs(model, input_ids, attention, completion, return_entropy=True)
        greedy = logprobs(model, input_ids, attention, completion, temperature=0.0)
    assert torch.equal(logps, greedy)  # greedy samples are scored at temperature 1
    assert ((entropy > 0) == completion.bool()).all()  # entropy only on completion tokens, positive there


def test_one_step_raises_logprob_of_positively_advantaged_tokens(tiny_lm):
    model, tokenizer, _ = tiny_lm
    model = type(model)(model.config)
    model.load_state_dict(tiny_lm[0].state_dict())
    input_ids, attention, completion = _batch(tokenizer)
    with torch.no_grad():
        old = logprobs(model, input_ids, attention, completion)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    new = logprobs(model, input_ids, attention, completion)
    loss, _ = policy_loss(new, old, torch.tensor([1.0, -1.0]), completion, max_completion_length=3)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        after = logprobs(model, input_ids, attention, completion)
    row_sum = lambda x, i: x[i][completion[i].bool()].sum().item()  # noqa: E731
    assert row_sum(after, 0) > row_sum(old, 0)  # A > 0: more likely
    assert row_sum(after, 1) < row_sum(old, 1)  # A < 0: less likely


def test_logprob_gap_is_measured_on_masked_tokens_only():
    from pasodoble.core.grpo import logprob_gap

    train = torch.tensor([[0.0, -1.0, -2.0, -9.0]])
    engine = torch.tensor([[5.0, -1.5, -2.0, 0.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    assert logprob_gap(train, engine, mask) == pytest.approx((0.25, 0.5))
    assert logprob_gap(train, engine, torch.zeros_like(mask)) == (0.0, 0.0)


def test_tis_weights_truncate_the_trainer_engine_ratio_and_scale_the_loss():
    from pasodoble.core.grpo import policy_loss, tis_weights

    train = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
    engine = torch.log(torch.tensor([[0.25, 0.5, 0.05]]))
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    w = tis_weights(train, engine, mask, cap=1.5)
    assert w[0].tolist() == pytest.approx([1.5, 1.0, 0.0])  # ratios 2 (capped), 1, masked
    logps = train.clone().requires_grad_(True)
    adv = torch.tensor([1.0])
    plain, _ = policy_loss(logps, train, adv, mask, loss_type="dapo", max_completion_length=3)
    weighted, _ = policy_loss(
        logps, train, adv, mask, loss_type="dapo", max_completion_length=3, token_weights=w
    )
    assert plain.item() == pytest.approx(-1.0) and weighted.item() == pytest.approx(-1.25)
    with pytest.raises(ValueError, match="cap"):
        tis_weights(train, engine, mask, cap=0.0)
