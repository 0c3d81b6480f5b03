"""The in-place embedding backward (`update.embedding_grad`): the same weight gradient as the stock embedding's, tied
head or not, with padding rows, accumulating onto an existing gradient."""

from __future__ import annotations

import pytest
import torch

from pasodoble.update.embedding_grad import can_add_rows, rows_into_grad


def _loss(model, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
    return (logits * weights).sum()


@pytest.mark.parametrize("existing", [False, True])
def test_the_tied_weight_gets_the_stock_gradient(tiny_lm, existing):
    model, tokenizer, _ = tiny_lm
    embedding = model.get_input_embeddings()
    assert can_add_rows(embedding) and embedding.weight is model.get_output_embeddings().weight
    assert embedding.padding_idx == tokenizer.pad_token_id
    ids = torch.randint(0, len(tokenizer), (3, 11), generator=torch.Generator().manual_seed(0))
    ids[0, -4:] = tokenizer.pad_token_id  # padding rows get no gradient from the lookup
    grads = []
    for inplace in (False, True):
        model.zero_grad(set_to_none=True)
        if existing:  # a micro-batch before this one left a gradient
            _loss(model, ids.flip(1)).backward()
        with rows_into_grad(model) if inplace else torch.enable_grad():
            loss = _loss(model, ids)
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    assert "forward" not in embedding.__dict__  # restored


def test_untied_weights_and_frozen_embeddings():
    torch.manual_seed(0)
    embedding, head = torch.nn.Embedding(13, 4, padding_idx=0), torch.nn.Linear(4, 13)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding, self.head = embedding, head

        def get_input_embeddings(self):
            return self.embedding

        def forward(self, ids):
            return self.head(self.embedding(ids)).sum(-1).pow(2).sum()

    model, ids = Model(), torch.tensor([[0, 3, 3, 7], [12, 0, 1, 1]])
    model(ids).backward()
    stock = embedding.weight.grad.clone()
    embedding.weight.grad = None
    with rows_into_grad(model):
        out = model(ids)
    out.backward()
    torch.testing.assert_close(embedding.weight.grad, stock)
    assert not embedding.weight.grad[0].any()  # the padding row
    embedding.weight.requires_grad_(False)
    assert not can_add_rows(embedding) and not can_add_rows(torch.nn.Linear(2, 2))
    assert not can_add_rows(torch.nn.Embedding(4, 2, max_norm=1.0))
