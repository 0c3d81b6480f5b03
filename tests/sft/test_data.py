"""`pasodoble sft-data` against a real loopback endpoint serving a tiny-world model: both sets, every fate counted
once, faults (429, 500, timeouts, dropped connections, a server killed mid-run) that lose nothing kept and count
nothing twice, and resumes that end at the target. The key's value appears in no file and no output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from pasodoble.cli import main
from pasodoble.core.prompts import parse_proposal
from pasodoble.errors import ConfigError
from pasodoble.grader import Grader, GraderConfig
from pasodoble.io import read_jsonl
from pasodoble.sft import load_examples
from pasodoble.sft.data import FATES, SFTDataConfig, SFTDataRun
from pasodoble.sft.teacher import OpenAITeacher, TeacherConfig

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_PROMPTS
from hostile_server import HostileServer, sft_data_recipe
from openai_server import OpenAIServer

KEY = "sk-pasodoble-test-5e1d0c"
KEY_ENV = "PASODOBLE_SFT_TEST_KEY"
SERVER_SCRIPT = Path(__file__).with_name("openai_server.py")


def server_env() -> dict:
    return {**os.environ, KEY_ENV: KEY, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def start_server_process(model_dir: Path, port_file: Path) -> tuple[subprocess.Popen, str]:
    """The loopback test server as a process of its own (so a test can SIGKILL it); returns it and its URL."""
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "--model", str(model_dir), "--port-file", str(port_file)]
        + ["--key-env", KEY_ENV],
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300  # hang guard only
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("test server did not start")
        time.sleep(0.1)
    return proc, port_file.read_text()


def config(out: Path, base_url: str, corpus: Path, **kw) -> dict:
    teacher = {
        "model": "tiny",
        "base_url": base_url,
        "api_key_env": KEY_ENV,
        "concurrency": 4,
        "backoff_s": 0.05,
        "max_backoff_s": 0.2,
        **kw.pop("teacher", {}),
    }
    return {
        "out_dir": str(out),
        "target_kept": 6,
        "max_passages": 12,
        "wave_passages": 2,
        "proposer_max_tokens": 160,
        "checker_max_tokens": 192,
        "teacher": teacher,
        "knowledge": {"path": str(corpus), "min_chars": 10, "chunk_tokens": 64},
        "prompts": TINY_PROMPTS,
        **kw,
    }


def run(cfg: dict) -> dict:
    from pasodoble.config import from_dict, validate_tree

    c = from_dict(SFTDataConfig, cfg)
    validate_tree(c)
    teacher = OpenAITeacher(c.teacher)
    with Grader(GraderConfig(num_workers=1)) as grader:
        return SFTDataRun(c, teacher, teacher, grader, progress=False).run()


def assert_consistent(out: Path, target: int) -> list[dict]:
    """Each key has one final fate, the report counts them, the sets hold exactly the kept rows."""
    rows = read_jsonl(out / "candidates.jsonl")
    final = {}
    for row in rows:
        assert row["key"] not in final or final[row["key"]]["fate"] == "error"  # only errors are ever redone
        final[row["key"]] = row
    report = json.loads((out / "report.json").read_text())
    assert report["candidates"] == len(final)
    assert report["fates"] == {f: sum(r["fate"] == f for r in final.values()) for f in FATES}
    kept = [r for r in final.values() if r["fate"] == "kept"]
    assert report["kept"] == len(kept) == target
    proposer, solver = load_examples(out / "proposer.jsonl"), load_examples(out / "solver.jsonl")
    assert len(proposer) == len(solver) == target
    for example, row in zip(proposer, sorted(kept, key=lambda r: (r["index"], r["sample"]))):
        parsed = parse_proposal(example["completion"])
        assert parsed.valid and parsed.question == row["question"] and parsed.answer == row["answer"]
    assert len({r["question"] for r in kept}) == target  # no duplicate question kept
    return kept


def assert_no_key(out: Path, *texts: str) -> None:
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(encoding="utf-8", errors="replace"), path
    for text in texts:
        assert KEY not in text


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def test_sft_data_cli_writes_both_sets_against_a_loopback_endpoint(cold_models, key, tmp_path, capfd):
    model_dir, corpus = cold_models
    with OpenAIServer(model_dir, key=KEY) as server:
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text(yaml.safe_dump(config(tmp_path / "out", server.base_url, corpus)))
        assert main(["sft-data", "--config", str(recipe), "--no-progress"]) == 0
        assert server.counts["ok"] == server.counts["requests"] > 0
    captured = capfd.readouterr()
    kept = assert_consistent(tmp_path / "out", 6)
    solver = load_examples(tmp_path / "out" / "solver.jsonl")
    assert [s["prompt"] for s in solver] == [r["question"] for r in kept]  # the Solver prompt is the question
    assert all(s["completion"].rstrip().endswith("}") and "\\boxed{" in s["completion"] for s in solver)
    saved = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())
    assert saved["teacher"]["api_key_env"] == KEY_ENV
    assert_no_key(tmp_path / "out", captured.out, captured.err)


def test_faults_change_nothing_that_is_kept(cold_models, key, tmp_path):
    """429, 500, replies slower than the timeout and dropped connections are retried; the seeded results equal
    a fault-free run's, so nothing was lost or written twice."""
    model_dir, corpus = cold_models
    with OpenAIServer(model_dir, key=KEY) as server:
        clean = run(config(tmp_path / "clean", server.base_url, corpus))
    plan = {0: "429", 1: "500", 2: "drop", 3: "slow", 5: "429", 8: "500", 9: "drop"}
    # the timeout is far above a normal reply and far below the slow one, so a loaded machine changes nothing
    teacher = {"timeout_s": 5.0, "max_retries": 8, "concurrency": 2}
    with OpenAIServer(model_dir, key=KEY, faults=lambda i: plan.get(i, "ok"), slow_s=10.0) as server:
        faulty = run(config(tmp_path / "faulty", server.base_url, corpus, teacher=teacher))
        assert all(server.counts[f] > 0 for f in ("429", "500", "drop", "slow"))
    assert faulty["fates"] == clean["fates"] and faulty["fates"]["error"] == 0
    retries = faulty["requests_this_run"]["teacher"]
    assert retries["retry/http_429"] and retries["retry/http_500"] and retries["retry/connection"]
    assert retries["retry/timeout"]
    for name in ("proposer.jsonl", "solver.jsonl"):
        assert (tmp_path / "faulty" / name).read_text() == (tmp_path / "clean" / name).read_text()
    assert_consistent(tmp_path / "faulty", 6)


def test_failed_requests_are_counted_as_errors_and_retried_by_a_rerun(cold_models, key, tmp_path):
    """The endpoint answers its first wave's requests (at most 24) and fails every later one with a 500: the run
    ends with kept rows and error rows; a rerun against a healthy endpoint redoes only the errors."""
    model_dir, corpus = cold_models
    # more than the first run's 4 passages x 6 samples can keep, so the rerun passes every one of their error rows
    # before it can reach the target (it stops writing once the target is reached)
    target = 25
    cfg = config(tmp_path / "out", "", corpus, teacher={"max_retries": 1}, max_passages=4, target_kept=target)
    with OpenAIServer(model_dir, key=KEY, faults=lambda i: "ok" if i < 24 else "500") as server:
        cfg["teacher"]["base_url"] = server.base_url
        first = run(cfg)
    assert first["fates"]["error"] > 0 and 0 < first["kept"] < target
    kept_before = {
        r["key"]: r for r in read_jsonl(tmp_path / "out" / "candidates.jsonl") if r["fate"] == "kept"
    }
    cfg["max_passages"] = 40
    with OpenAIServer(model_dir, key=KEY) as server:
        cfg["teacher"]["base_url"] = server.base_url
        second = run(cfg)
    assert second["error_rows"] == first["error_rows"]  # no new failures; the old ones were redone
    rows = read_jsonl(tmp_path / "out" / "candidates.jsonl")
    errors = [r.get("error") or r.get("reason") for r in rows if r["fate"] == "error"]
    assert second["fates"]["error"] == 0, errors  # the reasons, should a loaded machine ever show one
    kept = {r["key"]: r for r in assert_consistent(tmp_path / "out", target)}
    assert all(kept[k] == row for k, row in kept_before.items())  # nothing kept was lost or rewritten
    assert_no_key(tmp_path / "out")


def test_server_killed_mid_run_then_resumed(cold_models, tmp_path, monkeypatch):
    """The endpoint process is killed while requests are in flight; the run ends with error rows; a new endpoint
    and a rerun reach the target with every earlier kept row intact."""
    model_dir, corpus = cold_models
    monkeypatch.setenv(KEY_ENV, KEY)

    def start_server(name: str):
        return start_server_process(model_dir, tmp_path / f"{name}.port")

    out = tmp_path / "out"
    proc, url = start_server("a")
    cfg = config(out, url, corpus, teacher={"max_retries": 2}, target_kept=12, max_passages=8)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(run(cfg)))
    try:
        worker.start()
        deadline = time.monotonic() + 300
        while not (out / "candidates.jsonl").exists() or not read_jsonl(out / "candidates.jsonl"):
            assert time.monotonic() < deadline and worker.is_alive()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        worker.join(timeout=300)
    finally:
        proc.kill()
    assert not worker.is_alive() and result["fates"]["error"] > 0 and result["kept"] < 12
    kept_before = {r["key"]: r for r in read_jsonl(out / "candidates.jsonl") if r["fate"] == "kept"}
    proc, url = start_server("b")
    try:
        cfg["teacher"]["base_url"] = url
        cfg["max_passages"] = 30
        run(cfg)
    finally:
        proc.kill()
    kept = {r["key"]: r for r in assert_consistent(out, 12)}
    assert all(kept[k] == row for k, row in kept_before.items())
    assert_no_key(out)


def test_another_corpus_in_the_same_folder_is_refused(cold_models, key, tmp_path):
    model_dir, corpus = cold_models
    with OpenAIServer(model_dir, key=KEY) as server:
        cfg = config(tmp_path / "out", server.base_url, corpus, target_kept=1)
        run(cfg)
        cfg["knowledge"]["seed"] = 5
        cfg["target_kept"] = 3
        with pytest.raises(ConfigError, match="another corpus or knowledge.seed"):
            run(cfg)


def test_config_errors_before_anything_loads(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(config(tmp_path / "o", "http://127.0.0.1:9/v1", tmp_path)))
    assert main(["sft-data", "--config", str(recipe)]) == 2
    assert f"teacher.api_key_env: the environment variable {KEY_ENV} is not set" in capsys.readouterr().err
    monkeypatch.setenv(KEY_ENV, KEY)
    assert main(["sft-data", "--config", str(recipe), "solver_completion=judge"]) == 2
    assert "solver_completion" in capsys.readouterr().err


def test_local_teacher_kind_runs_the_same_pipeline(cold_models, tmp_path):
    model_dir, corpus = cold_models
    cfg = config(tmp_path / "out", "", corpus, target_kept=3)
    cfg["teacher"] = {"kind": "local", "model": str(model_dir)}
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(cfg))
    assert main(["sft-data", "--config", str(recipe), "--no-progress"]) == 0
    assert_consistent(tmp_path / "out", 3)


@pytest.mark.slow
def test_cli_killed_with_sigkill_half_way_resumes_to_the_target(cold_models, tmp_path):
    """Acceptance: the CLI, killed with SIGKILL half-way and rerun, ends with the target count, no duplicate and
    no lost example, and the key's value is in no file and no log."""
    model_dir, corpus = cold_models
    env = server_env()
    target, out = 40, tmp_path / "out"
    logs = []
    server, url = start_server_process(model_dir, tmp_path / "server.port")
    try:
        recipe = tmp_path / "r.yaml"
        recipe.write_text(yaml.safe_dump(config(out, url, corpus, target_kept=target, max_passages=60)))
        cmd = [sys.executable, "-m", "pasodoble", "sft-data", "--config", str(recipe)]
        first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while True:
            assert first.poll() is None, "the run ended before it was killed"
            rows = read_jsonl(out / "candidates.jsonl") if (out / "candidates.jsonl").exists() else []
            if sum(r["fate"] == "kept" for r in rows) >= target // 2:
                break
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        logs.append(first.communicate()[0])
        kept_before = {r["key"]: r for r in read_jsonl(out / "candidates.jsonl") if r["fate"] == "kept"}
        assert target // 2 <= len(kept_before) < target
        second = subprocess.run(cmd, env=env, capture_output=True, text=True)
        logs += [second.stdout, second.stderr]
        assert second.returncode == 0, second.stderr[-2000:]
    finally:
        server.kill()
    kept = {r["key"]: r for r in assert_consistent(out, target)}
    assert all(kept[k] == row for k, row in kept_before.items())
    assert_no_key(out, *logs)


def test_a_torn_last_row_is_cut_and_the_rerun_goes_on(cold_models, tmp_path):
    model_dir, corpus = cold_models
    cfg = config(tmp_path / "out", "", corpus, target_kept=3)
    cfg["teacher"] = {"kind": "local", "model": str(model_dir)}
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(cfg))
    assert main(["sft-data", "--config", str(recipe), "--no-progress"]) == 0
    ledger = tmp_path / "out" / "candidates.jsonl"
    before = ledger.read_text()
    with ledger.open("a") as f:
        f.write('{"key": "99:0", "fate": "ke')  # a crash in the middle of an append
    assert main(["sft-data", "--config", str(recipe), "--no-progress", "target_kept=6"]) == 0
    assert ledger.read_text().startswith(before)
    assert json.loads((tmp_path / "out" / "report.json").read_text())["torn_bytes_dropped"] == 27
    assert_consistent(tmp_path / "out", 6)


@pytest.mark.slow
def test_sft_data_then_sft_gives_checkpoints_train_accepts(cold_models, tmp_path):
    """The cold start end to end on CPU: sft-data -> two SFT checkpoints -> one dual-play step from them."""
    model_dir, corpus = cold_models
    cfg = config(tmp_path / "data", "", corpus, target_kept=8)
    cfg["teacher"] = {"kind": "local", "model": str(model_dir)}
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(cfg))
    assert main(["sft-data", "--config", str(recipe), "--no-progress"]) == 0
    for role in ("proposer", "solver"):
        argv = ["sft", "--model", str(model_dir), "--data", str(tmp_path / "data" / f"{role}.jsonl")]
        argv += ["--out", str(tmp_path / role), "--max-steps", "3", "--batch-size", "4", "--no-progress"]
        assert main(argv) == 0
    train = [
        "train",
        "--config",
        str(Path(__file__).resolve().parents[2] / "recipes" / "tiny-online.yaml"),
        f"run_dir={tmp_path / 'run'}",
        f"proposer.model={tmp_path / 'proposer'}",
        f"solver.model={tmp_path / 'solver'}",
        f"knowledge.path={corpus}",
        "schedule.steps=1",
        "schedule.passages_per_step=1",
        "schedule.checkpoint_every=1",
        "logging.quiet=true",
    ]
    assert main(train) == 0
    assert len(read_jsonl(tmp_path / "run" / "metrics.jsonl")) >= 1


def test_a_damaged_candidates_file_is_a_one_line_error(tmp_path):
    from pasodoble.errors import UserError
    from pasodoble.sft.data import Ledger

    path = tmp_path / "candidates.jsonl"
    path.write_text(
        '{"key": "0:0", "fate": "error"}\nnot json\n{"key": "0:1", "fate": "kept", "question": "q"}\n'
    )
    with pytest.raises(UserError, match="candidates.jsonl:2: not valid JSON.*use a new out_dir"):
        Ledger(path, retry_errors=True)


def test_token_budgets_below_one_are_refused():
    for name, value in (("proposer_max_tokens", -1), ("checker_max_tokens", 0)):
        cfg = SFTDataConfig(out_dir="o", teacher=TeacherConfig(kind="local", model="x"), **{name: value})
        with pytest.raises(ConfigError, match=f"{name}: must be at least 1"):
            cfg.validate()


def test_a_rerun_with_another_teacher_checker_or_prompt_is_refused(tmp_path, capfd, monkeypatch):
    """The candidates of one folder come from one teacher, checker, prompt set and sampling; a rerun may move the
    endpoint (a restarted server) or change its pacing, not what writes the rows."""
    monkeypatch.setenv(KEY_ENV, KEY)
    with HostileServer() as server:
        teacher = {"base_url": server.base_url, "api_key_env": KEY_ENV}
        path = sft_data_recipe(tmp_path, teacher, target_kept=2, max_passages=2)
        assert main(["sft-data", "--config", str(path), "--no-progress"]) == 0
        changes = [
            ("teacher.model=other", "teacher.model"),
            (
                "checker=" + json.dumps({**teacher, "model": "judge"}),
                "checker",
            ),  # none before: all fields new
            ('prompts.solver_template="Q: {question}"', "prompts.solver_template"),
            ("proposer_temperature=0.5", "proposer_temperature"),
        ]
        for override, named in changes:
            capfd.readouterr()
            code = main(["sft-data", "--config", str(path), "--no-progress", "target_kept=3", override])
            err = capfd.readouterr().err
            assert code == 2 and named in err and "use a new out_dir" in err and err.count("\n") == 1, err
        assert yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())["teacher"]["model"] == "m"
        requests = len(server.requests)
    with HostileServer() as restarted:
        moved = sft_data_recipe(
            tmp_path, {"base_url": restarted.base_url, "api_key_env": KEY_ENV, "concurrency": 1}
        )
        assert (
            main(["sft-data", "--config", str(moved), "--no-progress", "target_kept=3", "max_passages=3"])
            == 0
        )
    assert requests == 4 and len(restarted.requests) == 2
