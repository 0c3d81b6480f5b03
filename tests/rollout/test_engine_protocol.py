"""Every rollout engine and every sharding backend honours its protocol exactly: the same method signatures
(`generate(prompt_ids, sampling, on_batch, on_progress)`, `close()`, ...) and the attributes callers read
(`copies_weights`, `backend`), so no caller needs `getattr` or `hasattr` to use one. No vLLM or DeepSpeed import is
needed: the classes are checked, not started."""

from __future__ import annotations

import inspect

import pytest

from pasodoble.rollout.base import RolloutEngine
from pasodoble.rollout.hf import HFEngine
from pasodoble.rollout.server import VLLMServerEngine
from pasodoble.rollout.vllm import VLLMEngine
from pasodoble.rollout.vllm_common import AdapterEngine, AdapterHost
from pasodoble.scale.sharding.base import Sharding
from pasodoble.scale.sharding.ddp import Accelerated
from pasodoble.scale.sharding.deepspeed import DeepSpeedZero
from pasodoble.scale.sharding.fsdp2 import FullyShard
from pasodoble.scale.sharding.unsharded import Unsharded
from tests.loop_helpers import ScriptedEngine

ENGINES = [HFEngine, VLLMEngine, VLLMServerEngine, AdapterEngine, ScriptedEngine]
BACKENDS = [Unsharded, Accelerated, FullyShard, DeepSpeedZero]


def members(protocol) -> list[str]:
    """The methods a protocol declares (its own, not object's or Protocol's)."""
    return [n for n, v in vars(protocol).items() if inspect.isfunction(v) and not n.startswith("_")]


def same_signature(cls, protocol, name: str) -> bool:
    def params(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    return params(getattr(cls, name)) == params(getattr(protocol, name))


@pytest.mark.parametrize("engine", ENGINES, ids=lambda c: c.__name__)
def test_every_engine_has_the_protocol_methods_with_their_exact_signatures(engine):
    assert set(members(RolloutEngine)) == {"generate", "update_weights", "close"}
    for name in members(RolloutEngine):
        assert same_signature(engine, RolloutEngine, name), f"{engine.__name__}.{name}"
    assert isinstance(engine.copies_weights, bool)


@pytest.mark.parametrize("engine", [VLLMEngine, VLLMServerEngine], ids=lambda c: c.__name__)
def test_both_vllm_engines_host_adapters_alike(engine):
    for name in members(AdapterHost):
        assert same_signature(engine, AdapterHost, name), f"{engine.__name__}.{name}"


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda c: c.__name__)
def test_every_sharding_backend_is_a_sharding_and_no_other_backend(backend):
    assert Sharding in backend.__mro__
    assert not [b for b in BACKENDS if b is not backend and issubclass(backend, b)]
    for name in members(Sharding):
        assert same_signature(backend, Sharding, name), f"{backend.__name__}.{name}"
    assert "backend" in vars(backend) or "backend" in inspect.getsource(backend.__init__)
