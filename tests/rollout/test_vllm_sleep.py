"""Sleep mode's order of calls (`rollout.vllm_sleep.SleepCycle`), against a recording stand-in for `vllm.LLM`'s
`sleep` / `wake_up` (pure logic: the vLLM CPU build has no sleep mode, so the real calls run in bench/gpu_check.py's
`two_roles` section on a GPU)."""

from __future__ import annotations

from pasodoble.rollout.vllm_sleep import SLEEP_LEVEL, SleepCycle


class Recorder:
    """vLLM's sleep-mode surface, recording each call; it refuses the calls vLLM would get wrong."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.awake = {"weights", "kv_cache"}

    def sleep(self, level: int) -> None:
        assert self.awake, "sleep() on an engine already asleep"
        self.calls.append(("sleep", level))
        self.awake.clear()

    def wake_up(self, tags: list[str]) -> None:
        assert not set(tags) & self.awake, f"wake_up({tags}) of a part already awake"
        assert "kv_cache" not in tags or "weights" in self.awake | set(tags), (
            "KV cache woken before the weights"
        )
        self.calls.append(("wake_up", tuple(tags)))
        self.awake.update(tags)


def step(cycle: SleepCycle, engine: Recorder, log: list) -> None:
    """One role's step as the engine runs it: a rollout, then the weight sync after the update."""
    cycle.for_generation()
    log.append(("generate", frozenset(engine.awake)))
    cycle.after_generation()
    cycle.for_load()
    log.append(("load", frozenset(engine.awake)))


def test_weights_then_load_then_kv_cache_then_generate_then_sleep():
    engine, log = Recorder(), []
    cycle = SleepCycle(engine, enabled=True)
    cycle.start()
    for _ in range(2):
        step(cycle, engine, log)
    assert engine.calls == [
        ("sleep", SLEEP_LEVEL),  # released from the start
        ("wake_up", ("weights", "kv_cache")),  # first rollout
        ("sleep", SLEEP_LEVEL),
        ("wake_up", ("weights",)),  # sync: the weights only
        ("wake_up", ("kv_cache",)),  # next rollout: the KV cache joins the loaded weights
        ("sleep", SLEEP_LEVEL),
        ("wake_up", ("weights",)),
    ]
    both = frozenset({"weights", "kv_cache"})
    assert log == [("generate", both), ("load", {"weights"})] * 2


def test_two_syncs_in_a_row_wake_the_weights_once():
    engine = Recorder()
    cycle = SleepCycle(engine, enabled=True)
    cycle.start()
    cycle.for_load()
    cycle.for_load()
    assert engine.calls == [("sleep", SLEEP_LEVEL), ("wake_up", ("weights",))]


def test_disabled_makes_no_call():
    engine = Recorder()
    cycle = SleepCycle(engine, enabled=False)
    cycle.start()
    step(cycle, engine, [])
    assert engine.calls == []
