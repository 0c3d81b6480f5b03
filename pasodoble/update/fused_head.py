"""Token log-probs through the LM head as one autograd node that keeps a single vocabulary-sized buffer.

What: `head_logprobs(states, weight, targets, temperature)` returns log p(targets[i] | states[i]) for the
logits `states @ weight.T / temperature`, the values and gradients of `chunked_logprobs._chunk_logps` (to float
tolerance). Its forward turns the (N, V) logits into the softmax in place and keeps that one buffer for the
backward, which turns it in place into the logits' gradient, `g / T * (onehot(target) - softmax)`, before the two
matrix products. `can_fuse(head, states)` says when it applies: a bias-free `nn.Linear` head (or a fast path's linear layer that names its `head_product`) with a plain float32
weight, float32 states, no module hooks (a sharded or offloaded head keeps the stock path). Under autocast to
bfloat16 or float16 (a role's `dtype`) the three products take that dtype's inputs, as autocast's would, and the
softmax stays float32: the stock expression's numerics, without its bfloat16 logits, their float32 copy and the
buffers of their backward.

Why: the stock expression (`head(h).float() / T`, `gather`, `logsumexp`) keeps the logits for its backward and
builds several more (N, V) tensors there (the exp of logsumexp's backward, the zero tensor that gather's backward
scatters into, their sum, the division's gradient), each a pass over N x V floats and, at 49,152 entries a row, a
fresh allocation of 100+ MB that the allocator takes from and returns to the kernel (page faults on every touch).
The head is a fifth of SmolLM2-135M's FLOPs, and this memory traffic added to it (issue: performance).

Run: `can_fuse(head, states)` then `head_logprobs(states, head.weight, targets, temperature)`; used by
`chunked_logprobs.score_states`; tests in `tests/update/test_fused_head.py`; figures in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import torch

from pasodoble.update import fast_paths


class _HeadLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, states, weight, targets, temperature, compute_dtype, product):
        product = product if compute_dtype is None else torch.mm
        with torch.autocast(states.device.type, enabled=False):
            if compute_dtype is None:
                logits = product(states, weight.t())  # (N, V): the one vocabulary-sized buffer
            else:  # autocast's product: low-precision inputs, the softmax in float32
                logits = torch.mm(
                    states.to(compute_dtype), low_precision_copy(weight, compute_dtype).t()
                ).float()
            if temperature != 1.0:
                logits.div_(temperature)
            logits.sub_(logits.amax(-1, keepdim=True))
            picked = logits.gather(-1, targets[:, None]).squeeze(-1)
            logits.exp_()
            total = logits.sum(-1)
            logits.div_(total[:, None])  # the softmax, in place
        ctx.save_for_backward(states, weight, logits, targets)
        ctx.temperature = temperature
        ctx.compute_dtype = compute_dtype
        ctx.product = product
        return picked - total.log()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        states, weight, probs, targets = ctx.saved_tensors
        scale = grad.float() / ctx.temperature  # (N,)
        grad_logits = probs.mul_(-scale[:, None])  # the saved softmax becomes the gradient: it is read once
        grad_logits.scatter_add_(1, targets[:, None], scale[:, None])
        low = ctx.compute_dtype
        with torch.autocast(states.device.type, enabled=False):
            if low is not None:  # as autocast's backward of the product: low-precision inputs
                grad_logits = grad_logits.to(low)
            mm_weight = weight if low is None else low_precision_copy(weight, low)
            mm_states = states if low is None else states.to(low)
            grad_states = (
                ctx.product(grad_logits, mm_weight).to(states.dtype) if ctx.needs_input_grad[0] else None
            )
            grad_weight = (
                ctx.product(grad_logits.t(), mm_states).to(weight.dtype) if ctx.needs_input_grad[1] else None
            )
        return grad_states, grad_weight, None, None, None, None


LOW_PRECISION = (torch.bfloat16, torch.float16)

# per thread, `casts`: inside `reuse_head_casts()`, {key of a weight: (an alias of it, its cast)}
_scope = threading.local()


@contextlib.contextmanager
def reuse_head_casts():
    """Inside, `low_precision_copy` casts a head weight once and reuses the cast: for one pass of an update (its
    micro-batches' forwards, recomputes and backwards, before the optimizer steps), when the weights cannot change.
    Outside, every call casts afresh: nothing stale can be read after a step or a load, whatever bumps or skips the
    tensor's version counter (fused AdamW and writes through `.data` skip it). Nested scopes share the outer one. The
    scope is the calling thread's (ranks run as threads in one process must not share or end each other's)."""
    outer = getattr(_scope, "casts", None)
    _scope.casts = {} if outer is None else outer
    try:
        # the narrow kernel's transposed weights (`accel.narrow_matmul`), under the same promise
        with fast_paths.reuse_transposes():
            yield
    finally:
        _scope.casts = outer


def low_precision_copy(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`weight` cast to `dtype`; inside `reuse_head_casts()` once per weight (at 49,152 x 576 a cast into a fresh
    buffer cost more than a chunk's product, and an update made one per chunk and pass). The key is the memory, not
    the Python object (the backward's saved weight is another object over the same storage); the scope holds an
    alias, so that memory cannot be freed and reused by another tensor while it is a key."""
    casts = getattr(_scope, "casts", None)
    if casts is None:
        return weight.detach().to(dtype)
    key = (weight.data_ptr(), tuple(weight.shape), weight.stride(), weight.device, weight._version, dtype)
    if key not in casts:
        casts[key] = (weight.detach(), weight.detach().to(dtype))
    return casts[key][1]


def _autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast runs products in on `device_type`, or None when autocast is off there."""
    if not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)


def can_fuse(head: torch.nn.Module, states: torch.Tensor) -> bool:
    """True when `head(states)` is exactly `states @ head.weight.T` with nothing around the call: float32 weights and
    states, in float32 or under autocast to bfloat16 / float16 (then the product runs in that dtype, as autocast's)."""
    if not (type(head) is torch.nn.Linear or hasattr(type(head), "head_product")) or head.bias is not None:
        return False
    weight = head.weight
    plain = type(weight) is torch.nn.Parameter and type(weight.data) is torch.Tensor  # not a DTensor shard
    hooked = bool(head._forward_pre_hooks or head._forward_hooks)
    return (
        plain
        and not hooked
        and weight.dtype == torch.float32
        and states.dtype == torch.float32
        and _autocast_dtype(states.device.type) in (None, *LOW_PRECISION)
    )


def head_logprobs(
    states: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = torch.mm,
) -> torch.Tensor:
    """(N,) float32 log p(targets[i] | states[i]) under logits `states @ weight.T / temperature`; under autocast the
    product runs in autocast's dtype (the softmax and the result stay float32). `product`: the (M, K) @ (K, N) the
    float32 products run through, as the head module's own would (`products_of`)."""
    low = _autocast_dtype(states.device.type)
    return _HeadLogprobs.apply(
        states, weight, targets, float(temperature), low if low in LOW_PRECISION else None, product
    )


def products_of(head: torch.nn.Module) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The float32 product `head`'s own forward runs: a fast path's linear layer names its own (`head_product`, set
    by `pasodoble.accel`), a stock `nn.Linear` runs `torch.mm`."""
    return getattr(type(head), "head_product", torch.mm)
