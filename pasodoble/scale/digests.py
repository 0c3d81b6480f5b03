"""Short, stable fingerprints for the decisions log: JSON-able loop state and a model's full weights.

Every rank of a run writes them (`distributed.decisions_log`); equal digests on every rank show that the ranks
shared their history, buffer and weights bit for bit after each step.
"""

from __future__ import annotations

import hashlib
import json

import torch


def digest(obj: object) -> str:
    """A short stable fingerprint of JSON-able state (history, buffer) for cross-rank comparisons."""
    return hashlib.blake2b(json.dumps(obj, sort_keys=True, default=str).encode(), digest_size=12).hexdigest()


def weights_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """Fingerprint of a model's full weights (bit-exact): equal on every rank after a synchronised update."""
    h = hashlib.blake2b(digest_size=12)
    for name, p in state_dict.items():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
