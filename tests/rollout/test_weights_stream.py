"""`rollout.weights.cast_tensors`: the direct load's stream of (name, tensor) pairs is lazy (one tensor cast at a
time, so the extra memory is bounded by what the consumer holds), casts floats only, and carries a tied
parameter once, as the safetensors copy does."""

from __future__ import annotations

import types

import torch

from pasodoble.rollout.weights import cast_tensors, unique_tensors


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("steps", torch.tensor([3]))


def test_a_tied_parameter_travels_once_under_its_first_name():
    assert sorted(n for n, _ in unique_tensors(Tied())) == ["embed.weight", "steps"]


def test_the_stream_is_lazy_and_casts_floats_only():
    model = Tied()
    stream = cast_tensors(model, torch.bfloat16)
    assert isinstance(stream, types.GeneratorType)
    first = next(stream)  # one pair, computed on demand
    pairs = dict([first, *stream])
    assert pairs["embed.weight"].dtype == torch.bfloat16 and pairs["steps"].dtype == torch.long
    assert torch.equal(pairs["embed.weight"], model.embed.weight.detach().to(torch.bfloat16))


def test_a_tensor_already_in_the_engines_dtype_is_not_copied():
    model = Tied()
    pairs = dict(cast_tensors(model, torch.float32))
    assert pairs["embed.weight"].data_ptr() == model.embed.weight.data_ptr()
