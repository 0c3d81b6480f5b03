"""Token log-probs through the LM head as one autograd node that keeps a single vocabulary-sized buffer.

What: `head_logprobs(states, weight, targets, temperature)` returns log p(targets[i] | states[i]) for the
logits `states @ weight.T / temperature`, the values and gradients of `chunked_logprobs._chunk_logps` (to float
tolerance). Its forward turns the (N, V) logits into the softmax in place and keeps that one buffer for the
backward, which turns it in place into the logits' gradient, `g / T * (onehot(target) - softmax)`, before the two
matrix products. `can_fuse(head, states)` says when it applies: a bias-free `nn.Linear` head with a plain float32
weight, float32 states, no module hooks (a sharded or offloaded head keeps the stock path), autocast off.

Why: the stock expression (`head(h).float() / T`, `gather`, `logsumexp`) keeps the logits for its backward and
builds several more (N, V) tensors there (the exp of logsumexp's backward, the zero tensor that gather's backward
scatters into, their sum, the division's gradient), each a pass over N x V floats and, at 49,152 entries a row, a
fresh allocation of 100+ MB that the allocator takes from and returns to the kernel (page faults on every touch).
The head is a fifth of SmolLM2-135M's FLOPs, and this memory traffic added to it (issue: performance).

Run: `can_fuse(head, states)` then `head_logprobs(states, head.weight, targets, temperature)`; used by
`chunked_logprobs.score_states`; tests in `tests/test_fused_head.py`; figures in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import torch


class _HeadLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, states, weight, targets, temperature):
        logits = torch.mm(states, weight.t())  # (N, V): the one vocabulary-sized buffer
        if temperature != 1.0:
            logits.div_(temperature)
        logits.sub_(logits.amax(-1, keepdim=True))
        picked = logits.gather(-1, targets[:, None]).squeeze(-1)
        logits.exp_()
        total = logits.sum(-1)
        logits.div_(total[:, None])  # the softmax, in place
        ctx.save_for_backward(states, weight, logits, targets)
        ctx.temperature = temperature
        return picked - total.log()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        states, weight, probs, targets = ctx.saved_tensors
        scale = grad / ctx.temperature  # (N,)
        grad_logits = probs.mul_(-scale[:, None])  # the saved softmax becomes the gradient: it is read once
        grad_logits.scatter_add_(1, targets[:, None], scale[:, None])
        grad_states = torch.mm(grad_logits, weight) if ctx.needs_input_grad[0] else None
        grad_weight = torch.mm(grad_logits.t(), states) if ctx.needs_input_grad[1] else None
        return grad_states, grad_weight, None, None


def can_fuse(head: torch.nn.Module, states: torch.Tensor) -> bool:
    """True when `head(states)` is exactly `states @ head.weight.T` in float32 with nothing around the call."""
    if type(head) is not torch.nn.Linear or head.bias is not None:
        return False
    weight = head.weight
    plain = type(weight) is torch.nn.Parameter and type(weight.data) is torch.Tensor  # not a DTensor shard
    hooked = bool(head._forward_pre_hooks or head._forward_hooks)
    return (
        plain
        and not hooked
        and weight.dtype == torch.float32
        and states.dtype == torch.float32
        and not torch.is_autocast_enabled(states.device.type)
    )


def head_logprobs(
    states: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float
) -> torch.Tensor:
    """(N,) float32 log p(targets[i] | states[i]) under logits `states @ weight.T / temperature`."""
    return _HeadLogprobs.apply(states, weight, targets, float(temperature))
