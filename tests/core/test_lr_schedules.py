"""Learning-rate schedules: the same factors as transformers' `get_scheduler` step by step, the same scheduler state
(a checkpoint written either way restores), and the role follows its schedule."""

from __future__ import annotations

import pytest
import torch

from pasodoble.core import lr_schedules
from tests.roles.test_roles import make_role, sampled

HF_NAMES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}


def optimizer() -> torch.optim.Optimizer:
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=0.5)


def assert_in_step(ours, theirs, steps: int) -> None:
    """Both schedulers give the same rate before each of `steps` steps of their optimizers."""
    for _ in range(steps):
        assert ours.get_last_lr() == theirs.get_last_lr()
        ours.optimizer.step(), theirs.optimizer.step()
        ours.step(), theirs.step()


@pytest.mark.parametrize("name", lr_schedules.SCHEDULES)
@pytest.mark.parametrize(("warmup", "total"), [(0, 1), (0, 10), (3, 10), (4, 4), (5, 3)])
def test_factors_equal_transformers_at_every_step(name, warmup, total):
    from transformers import get_scheduler

    ours = lr_schedules.build(name, optimizer(), warmup_steps=warmup, total_steps=total)
    theirs = get_scheduler(HF_NAMES[name], optimizer(), num_warmup_steps=warmup, num_training_steps=total)
    assert_in_step(ours, theirs, total + 3)


def test_plain_constant_equals_transformers_constant():
    from transformers import get_scheduler

    ours = lr_schedules.build("constant", optimizer(), warmup_steps=0, total_steps=5)
    theirs = get_scheduler("constant", optimizer())
    assert_in_step(ours, theirs, 6)
    assert ours.get_last_lr() == [0.5]


def test_literal_factors():
    assert [lr_schedules.linear(s, warmup_steps=2, total_steps=6) for s in range(7)] == [
        0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0
    ]  # fmt: skip
    assert lr_schedules.cosine(4, warmup_steps=2, total_steps=6) == pytest.approx(0.5)
    assert lr_schedules.cosine(6, warmup_steps=2, total_steps=6) == 0.0
    assert (
        lr_schedules.constant(1, warmup_steps=4) == 0.25 and lr_schedules.constant(7, warmup_steps=4) == 1.0
    )


@pytest.mark.parametrize("name", lr_schedules.SCHEDULES)
def test_state_restores_across_the_two_implementations(name):
    """A checkpoint's scheduler state from transformers' scheduler (earlier versions) restores into ours, and back."""
    from transformers import get_scheduler

    theirs = get_scheduler(HF_NAMES[name], optimizer(), num_warmup_steps=2, num_training_steps=8)
    for _ in range(3):
        theirs.optimizer.step(), theirs.step()
    ours = lr_schedules.build(name, optimizer(), warmup_steps=2, total_steps=8)
    ours.load_state_dict(theirs.state_dict())
    assert_in_step(ours, theirs, 6)
    back = get_scheduler(HF_NAMES[name], optimizer(), num_warmup_steps=2, num_training_steps=8)
    back.load_state_dict(ours.state_dict())
    assert back.get_last_lr() == ours.get_last_lr()


def test_unknown_name_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="constant"):
        lr_schedules.build("step", optimizer(), warmup_steps=0, total_steps=1)


def test_role_lr_follows_its_schedule():
    role = make_role(lr_scheduler="linear", warmup_steps=1, lr=1e-2)
    role._build_optimizer(total_updates=3)
    samples, adv = sampled(role, ["1+1"])
    before = [p.detach().clone() for p in role.model.parameters()]
    lrs = [role.update(samples, adv)["lr"] for _ in range(3)]  # each is the rate the next update takes
    assert lrs == pytest.approx([1e-2, 0.5e-2, 0.0])
    role = make_role(lr_scheduler="linear", warmup_steps=1, lr=1e-2)
    role._build_optimizer(total_updates=3)
    role.update(samples, adv)  # the warm-up's first step runs at rate 0
    assert all(torch.equal(a, b) for a, b in zip(before, role.model.parameters()))
