"""Rollout placement: which GPUs dedicated servers take, who starts them and who syncs their weights.

The end-to-end runs (2 training ranks sharing one started vLLM server) are in tests/test_dedicated_rollouts.py
(markers `vllm` and `distributed`); here the placement's logic runs against a scripted collective and a real
HTTP health endpoint on loopback."""

from __future__ import annotations

import http.server
import threading
from types import SimpleNamespace

import pytest

from pasodoble.rollout.hosts import advertised_host, device_list
from pasodoble.rollout.placement import Placement, server_gpus, server_roles
from pasodoble.rollout.server import EngineUnavailable, VLLMServerEngine, free_port
from pasodoble.rollout.server_auth import CHALLENGE_HEADER, PID_HEADER, PROOF_HEADER, proof
from pasodoble.rollout.settings import VLLMConfig


class ScriptedCollective:
    """A rank of a run whose rank 0 already broadcast `value`; records barriers."""

    def __init__(self, rank: int, world_size: int, value=None):
        self.rank, self.world_size, self.value, self.barriers = rank, world_size, value, []

    def broadcast(self, obj, what=""):
        return obj if self.rank == 0 else self.value

    def barrier(self, what=""):
        self.barriers.append(what)


def role(engine="vllm_server", **vllm):
    return SimpleNamespace(engine=engine, vllm=VLLMConfig(**vllm))


TOKEN = "the-runs-token"


@pytest.fixture
def health_server():
    """A /health endpoint that proves it holds TOKEN, as a started server's guard does (`server_auth`)."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            challenge = self.headers.get(CHALLENGE_HEADER, "")
            self.send_header(PROOF_HEADER, proof(TOKEN, challenge, 4242))
            self.send_header(PID_HEADER, "4242")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_server_gpus_are_the_last_vllm_gpus_in_role_order():
    assert server_gpus(8, 2, {"proposer": 1, "solver": 1}) == {"proposer": [6], "solver": [7]}
    assert server_gpus(8, 4, {"solver": 2}) == {"solver": [4, 5]}  # the rest of the 4 stay unused
    assert server_gpus(0, 0, {"proposer": 1, "solver": 1}) == {"proposer": [], "solver": []}  # on the CPU
    with pytest.raises(
        ValueError, match=r"need 3 GPUs \(proposer 1, solver 2\) but distributed.vllm_gpus is 2"
    ):
        server_gpus(8, 2, {"proposer": 1, "solver": 2})


def test_server_roles_skip_other_engines_and_given_urls():
    roles = {"proposer": role("hf"), "solver": role(), "judge": role(server_url="http://h:1")}
    assert server_roles(roles) == ["solver"]


def test_device_list_maps_through_the_parents_visible_devices():
    assert device_list([6, 7], {}) == "6,7"
    assert device_list([1, 2], {"CUDA_VISIBLE_DEVICES": "4,5,6"}) == "5,6"


def test_all_interfaces_are_advertised_as_the_rendezvous_address():
    assert advertised_host("0.0.0.0", {"MASTER_ADDR": "node0"}) == "node0"
    assert advertised_host("10.0.0.5", {"MASTER_ADDR": "node0"}) == "10.0.0.5"


def test_rank_0_starts_the_shared_server_on_its_gpus_and_owns_the_weights():
    started = []

    def start(**where):
        started.append(where)
        return SimpleNamespace(url=f"http://127.0.0.1:{where['port']}")

    collective = ScriptedCollective(0, 2)
    placement = Placement("dedicated", collective, gpus={"solver": [6]})
    shared = placement.server_for("solver", role(server_port=8123), start)
    token = started[0].pop("token")
    assert started == [{"devices": [6], "port": 8123, "host": "127.0.0.1", "wait": True}]
    assert shared.owner and shared.url == "http://127.0.0.1:8123" and shared.server is not None
    assert shared.token == token and len(token) >= 32  # the other ranks get it with the port
    shared.after_sync()
    assert collective.barriers == ["solver vLLM server up", "vLLM weight sync"]


def test_other_ranks_wait_for_rank_0s_server_and_start_nothing(health_server):
    collective = ScriptedCollective(1, 2, value=(health_server, TOKEN))
    placement = Placement("dedicated", collective, gpus={"solver": [6]})
    shared = placement.server_for("solver", role(), lambda **_: pytest.fail("rank 1 started a server"))
    assert shared.url == f"http://127.0.0.1:{health_server}"
    assert not shared.owner and shared.server is None and shared.after_sync is not None
    assert shared.token == TOKEN


def test_other_ranks_refuse_a_server_that_cannot_prove_the_runs_token(health_server):
    """A process that took the port answers /health, but without the token its proof is wrong: raise at once."""
    collective = ScriptedCollective(1, 2, value=(health_server, "another-token"))
    placement = Placement("dedicated", collective)
    with pytest.raises(EngineUnavailable, match="is not the server this run started .a wrong proof."):
        placement.server_for("solver", role(), lambda **_: None)


def test_a_rank_whose_server_never_comes_up_says_which_and_for_how_long():
    collective = ScriptedCollective(1, 2, value=(free_port(), TOKEN))
    placement = Placement("dedicated", collective)
    with pytest.raises(
        EngineUnavailable, match=r"the solver's vLLM server \(started by rank 0\) was not healthy"
    ):
        placement.server_for("solver", role(server_start_timeout_s=1.0), lambda **_: None)


def test_colocated_ranks_start_their_own_server_on_their_own_gpu():
    started = []

    def start(**where):
        started.append(where)
        return SimpleNamespace(url="http://127.0.0.1:1")

    placement = Placement("colocated", ScriptedCollective(1, 2), local_gpu=1)
    shared = placement.server_for("solver", role(), start)
    assert started[0]["devices"] == [1] and shared.owner and shared.after_sync is None
    assert shared.token == started[0]["token"]


def test_a_given_url_on_several_ranks_is_shared_with_rank_0_syncing(monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    for rank in (0, 1):
        placement = Placement("colocated", ScriptedCollective(rank, 2))
        shared = placement.server_for("solver", role(server_url="http://h:9"), lambda **_: None)
        assert shared.url == "http://h:9" and shared.owner == (rank == 0) and shared.after_sync is not None
    one = Placement().server_for("solver", role(server_url="http://h:9"), lambda **_: None)
    assert one.owner and one.after_sync is None and one.token is None
    monkeypatch.setenv("VLLM_API_KEY", "their-key\r\n")  # a given server's own key: the client sends it
    assert (
        Placement().server_for("solver", role(server_url="http://h:9"), lambda **_: None).token == "their-key"
    )


def test_a_non_owner_pushes_nothing_but_waits_and_tracks_adapter_names(tmp_path):
    waits = []
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: any request would raise EngineUnavailable
    engine = VLLMServerEngine(dead, None, VLLMConfig(), owner=False, after_sync=lambda: waits.append(1))
    engine.update_weights(model=None)  # would call save_pretrained on an owner
    engine.sync_adapter("solver", tmp_path)
    engine.sync_adapter("solver", tmp_path)
    assert waits == [1, 1, 1]
    assert engine._lora == {"solver": "solver-v3"}  # the owner serves the same name: versions count alike
    engine.close()


def test_a_dedicated_layout_on_one_process_still_puts_its_server_on_the_dedicated_gpus():
    started = []

    def start(**where):
        started.append(where)
        return SimpleNamespace(url=f"http://127.0.0.1:{where['port']}", log_path="log")

    lines = []
    placement = Placement("dedicated", ScriptedCollective(0, 1), gpus={"solver": [7]}, say=lines.append)
    shared = placement.server_for("solver", role(), start)
    assert started[0]["devices"] == [7] and shared.owner and shared.after_sync is None
    assert lines and "on GPU 7 for 1 rank(s)" in lines[0]


def test_a_started_server_process_ends_when_its_starter_dies(tmp_path):
    """The starter exits with os._exit (as a rank does on a collective failure): its child gets SIGTERM."""
    import os
    import subprocess
    import sys
    import time

    import psutil

    pid_file = tmp_path / "child.pid"
    starter = f"""
import os, subprocess, sys, time
from pasodoble.rollout.server import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                         preexec_fn=die_with_parent)
open({str(pid_file)!r}, "w").write(str(child.pid))
time.sleep(0.5)
os._exit(1)
"""
    env = {**os.environ, "PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-c", starter], env=env, timeout=60)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child outlived its starter"
        time.sleep(0.1)
