"""The order in which a colocated vLLM engine takes GPU memory and gives it back (sleep mode).

What: `SleepCycle(llm, enabled)` wraps the three vLLM calls of sleep mode (`LLM.sleep(level)`, `LLM.wake_up(tags)`
with the tags `weights` and `kv_cache`) in the two moments the engine needs memory:
  - a weight sync: `for_load()` wakes the weights only (the KV cache stays released while the trainer still holds
    its activations), the caller loads the new weights;
  - a rollout: `for_generation()` wakes whatever still sleeps (weights, then the KV cache), the caller generates,
    and `after_generation()` puts the whole engine back to sleep at once.
So between rollouts an engine holds neither its KV cache nor (level 1) its weights on the GPU, and two roles'
engines plus their trainers fit one GPU as long as one engine is awake at a time. With `enabled=False` every call
is a no-op (CPU, or `vllm.sleep_mode: false`).

Why level 1 and not 2 (TRL's choice when it reloads every step): level 2 discards the weights, and a role may
generate twice without a sync in between (an update skipped, a periodic evaluation), which would then sample from
discarded memory. Level 1 keeps a host copy, so every wake is valid; the cost is one device-to-host copy of the
weights per sleep.

Tests: tests/rollout/test_vllm_sleep.py (the order of calls against a recording engine: pure logic; the CPU build
has no sleep mode).
"""

from __future__ import annotations

SLEEP_LEVEL = 1  # offload the weights to host memory, discard the KV cache (see the docstring)
TAGS = ("weights", "kv_cache")  # what vLLM can wake separately, in the order they must come back


class SleepCycle:
    """Which parts of one engine are awake, and the vLLM calls that change that (see the module docstring)."""

    def __init__(self, llm, enabled: bool):
        self.llm, self.enabled = llm, enabled
        self.awake = set(TAGS)  # a new engine starts awake

    def _wake(self, tags: tuple[str, ...]) -> None:
        missing = [t for t in tags if t not in self.awake]
        if self.enabled and missing:
            self.llm.wake_up(tags=missing)
            self.awake.update(missing)

    def for_load(self) -> None:
        """Before a weight sync: the weights on the device, the KV cache still released."""
        self._wake(("weights",))

    def for_generation(self) -> None:
        """Before a rollout: weights and KV cache on the device."""
        self._wake(TAGS)

    def after_generation(self) -> None:
        """After a rollout: everything released until the next sync or rollout."""
        if self.enabled and self.awake:
            self.llm.sleep(level=SLEEP_LEVEL)
            self.awake.clear()

    def start(self) -> None:
        """Right after the engine starts: released until first needed (its first sync or rollout)."""
        self.after_generation()
