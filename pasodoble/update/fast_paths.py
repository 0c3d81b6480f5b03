"""The slots where the optional CPU fast paths (`pasodoble.accel`) plug into update batching and decoding.

What: `train_attention` (an object with `applies(q, k, v)`, `attention(q, k, v, mask, scale, causal)` and
`over_spans(q, k, v, bounds, length, scale)`), `decode` (with `serves(keys)`, `by_column(keys)` and
`prefix_decode(...)`) and `reuse_transposes` (a context inside which a fast linear layer may keep its weights'
transposes). Each is None (or a null context) until `pasodoble.accel` fills it; where it is None the plain torch path
runs, with the same values to float rounding.

Why: update batching and the rollout engines sit below the accelerator package in the layers and must not import a
kernel module; the accelerator package imports them and plugs its kernels in here, so that one door
(`pasodoble.accel`) decides which fast paths run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

train_attention: Any = None  # the compiled training attention kernel, or None: SDPA
decode: Any = None  # the compiled decode kernel, or None: the tensor path
reuse_transposes: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
