"""An input-embedding lookup whose backward adds the rows it used into the weight's gradient, in place.

What: inside `rows_into_grad(model)` the model's input embedding (a plain `torch.nn.Embedding` being trained)
looks tokens up as before, but its backward adds each used row's gradient into `weight.grad` with `index_add_`
(creating `weight.grad` as zeros when it is None) and hands autograd no gradient for the weight. The gradient that
reaches `weight.grad` is the same as the stock embedding's (padding rows excluded, as `padding_idx` excludes them);
other uses of the weight (a tied LM head) still accumulate theirs through autograd, in either order.

Why: the stock backward (`embedding_dense_backward`) builds a zero (V, H) tensor, adds the used rows into it, and
autograd then adds that whole tensor into `weight.grad`: for SmolLM2-135M's 49,152 x 576 vocabulary two passes over
113 MB per micro-batch for a few hundred rows, about 5% of an update's time in a profile (docs/PERFORMANCE.md).

Run: `with rows_into_grad(model): loss = f(model(...)); loss.backward()`; the backward may run after the block.
Only for a module run unsharded: data-parallel wrappers all-reduce a gradient when autograd accumulates it, which
this path bypasses. Tests in `tests/update/test_embedding_grad.py`.
"""

from __future__ import annotations

import contextlib

import torch


class _RowsIntoGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight: torch.Tensor, ids: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
        ctx.weight, ctx.padding_idx = weight, padding_idx
        ctx.save_for_backward(ids)
        return torch.nn.functional.embedding(ids, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        weight = ctx.weight
        rows, values = ids.reshape(-1), grad.reshape(-1, grad.shape[-1])
        if ctx.padding_idx is not None:  # zeros, not a boolean index: no count read back to size the result
            values = torch.where((rows != ctx.padding_idx)[:, None], values, 0)
        with torch.no_grad():
            if weight.grad is None:
                weight.grad = torch.zeros_like(weight)
            weight.grad.index_add_(0, rows, values.to(weight.grad.dtype))
        return None, None, None


def can_add_rows(module: torch.nn.Module | None) -> bool:
    """True for a plain, trained `torch.nn.Embedding` (no max_norm renormalisation, no sparse gradient)."""
    return (
        type(module) is torch.nn.Embedding
        and module.max_norm is None
        and not module.sparse
        and module.weight.requires_grad
    )


@contextlib.contextmanager
def rows_into_grad(model: torch.nn.Module):
    """The model's input embedding backpropagates into `weight.grad` in place for the duration (see module); a
    model whose embedding is not a plain trained one runs unchanged."""
    get = getattr(model, "get_input_embeddings", None)
    embedding = get() if callable(get) else None
    if not can_add_rows(embedding):
        yield
        return
    # an instance attribute shadows the class's forward
    embedding.forward = lambda ids: _RowsIntoGrad.apply(embedding.weight, ids, embedding.padding_idx)
    try:
        yield
    finally:
        del embedding.forward
