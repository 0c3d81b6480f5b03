"""Progress output: one plain line every few percent where the output is not a terminal, tqdm's redrawn bar on a
terminal, library bars and notes off, and the SFT bar saying its stop rule and where it stopped."""

from __future__ import annotations

import copy
import importlib.util
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pasodoble.progress import LOG_PERCENT, progress_bar, quiet_libraries


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_line_every_few_percent_and_no_carriage_return():
    out = io.StringIO()
    for _ in progress_bar(range(1000), desc="work", file=out):
        pass
    text = out.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and "\x1b" not in text
    assert len(lines) <= 100 // LOG_PERCENT + 2
    assert lines[-1].startswith("work: 100%") and "1000/1000" in lines[-1]


def test_a_terminal_gets_tqdms_redrawn_bar():
    out = _Terminal()
    for _ in progress_bar(range(50), desc="work", file=out, mininterval=0):
        pass
    assert out.getvalue().count("\r") > 10


def test_a_disabled_bar_prints_nothing():
    out = io.StringIO()
    for _ in progress_bar(range(10), file=out, disable=True):
        pass
    assert out.getvalue() == ""


def test_quiet_libraries_turns_off_hub_bars_unless_the_user_set_them(monkeypatch):
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.setattr(logging.getLogger("matplotlib"), "level", logging.NOTSET)
    quiet_libraries()
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert logging.getLogger("matplotlib").getEffectiveLevel() == logging.WARNING
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
    quiet_libraries()
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"


SAVE = """
import sys
from transformers import AutoModelForCausalLM
if sys.argv[1] == "quiet":
    from pasodoble.progress import quiet_libraries
    quiet_libraries()
AutoModelForCausalLM.from_pretrained(sys.argv[2]).save_pretrained(sys.argv[3])
print("deepspeed imported:", "deepspeed" in sys.modules)
"""


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed")
@pytest.mark.parametrize("mode", ["quiet", "plain"])
def test_saving_a_model_on_a_cpu_does_not_print_deepspeeds_cpu_fallback(tiny_lm, tmp_path, mode):
    """`save_pretrained` imports DeepSpeed where it is installed; a CPU run (no GPU visible) that never uses the
    DeepSpeed backend shows no `Setting accelerator to CPU` warning. The plain run shows that it would."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    env.pop("DS_ACCELERATOR", None)  # DeepSpeed warns only when it detects the accelerator itself
    out = subprocess.run(
        [sys.executable, "-c", SAVE, mode, str(tiny_lm[2]), str(tmp_path / "saved")],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "deepspeed imported: True" in out.stdout
    assert ("Setting accelerator to CPU" in out.stdout + out.stderr) == (mode == "plain")


class _StopAt:
    rule = "the loss is low enough"

    def __init__(self, step: int):
        self.step = step

    def __call__(self, step: int) -> bool:
        return step == self.step


def test_sft_bar_names_its_stop_rule_and_the_stop(tiny_lm, capsys):
    from pasodoble.sft.trainer import SFTConfig, train_sft

    model, tokenizer, _ = tiny_lm
    model = copy.deepcopy(
        model
    )  # the fixture is the session's: train a copy, not what later tests generate with
    examples = [{"prompt": "1+1", "completion": "2"}, {"prompt": "2+2", "completion": "4"}] * 4
    config = SFTConfig(max_steps=10, batch_size=4, warmup_steps=1, log_every=1, num_threads=None)
    summary = train_sft(model, tokenizer, examples, config, progress=True, role="solver", stop=_StopAt(3))
    err = capsys.readouterr().err
    assert summary["solver/sft/steps"] == 3
    assert "SFT solver (at most 10 steps; stops early when the loss is low enough)" in err
    assert "SFT solver: stopped at step 3 of at most 10: the loss is low enough" in err


def test_the_command_line_turns_transformers_bars_off_before_importing_it():
    """transformers reads the hub's setting once, at its import: `main` must set it before a command module loads."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import os, sys\n"
        "os.environ.pop('HF_HUB_DISABLE_PROGRESS_BARS', None)\n"
        "from pasodoble.cli import main\n"
        "try:\n"
        "    main(['train', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "from transformers.utils import logging\n"
        "print('transformers' in sys.modules, logging.is_progress_bar_enabled())\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True False"
