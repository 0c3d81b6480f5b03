"""The loop, the roles, the engines and the GPU check import without datasets and math-verify (a GPU machine for
checks may have neither); only grading and benchmark loading need them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python(code: str) -> str:
    """The standard output of `code` run by a fresh interpreter in the repository root (which must succeed)."""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_loop_and_gpu_check_import_without_datasets_or_math_verify():
    code = (
        "import sys\n"
        "for m in ('math_verify', 'datasets', 'latex2sympy2_extended'): sys.modules[m] = None\n"
        "import pasodoble.dualplay, pasodoble.roles.role, pasodoble.roles.adapters, pasodoble.rollout.factory\n"
        "import pasodoble.rollout.server, pasodoble.grader.extract\n"
        "import runpy; runpy.run_path('bench/gpu_check.py', run_name='gpu_check')\n"
        "runpy.run_path('bench/gpu_dualplay.py', run_name='gpu_dualplay')\n"
        "try:\n"
        "    from pasodoble.grader import Grader\n"
        "except ImportError:\n"
        "    print('grader needs math-verify')\n"
    )
    assert "grader needs math-verify" in python(code)


def test_a_role_without_lora_never_imports_peft(tiny_lm):
    """peft is imported by LoRA roles alone: its import holds about 40 MB for the whole run (core/lr_schedules.py)."""
    code = (
        "import sys\n"
        "from pasodoble.roles.role import Role, RoleConfig, Sample\n"
        "import pasodoble.dualplay\n"
        f"cfg = RoleConfig(model={str(tiny_lm[2])!r}, num_generations=2, max_completion_length=4,"
        " lr_scheduler='cosine', warmup_steps=1)\n"
        "role = Role.from_pretrained('solver', cfg, cfg.model, total_updates=2)\n"
        "prompt = role.prompt_ids([{'role': 'user', 'content': '1+1'}])\n"
        "group = role.generate([prompt], seed=0)[0]\n"
        "role.update([Sample(prompt, c) for c in group], [1.0, -1.0])\n"
        "print('peft' in sys.modules)\n"
    )
    assert python(code).strip().splitlines()[-1] == "False"
