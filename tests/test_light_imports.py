"""The loop, the roles, the engines and the GPU check import without datasets and math-verify (a GPU machine for
checks may have neither); only grading and benchmark loading need them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_loop_and_gpu_check_import_without_datasets_or_math_verify():
    code = (
        "import sys\n"
        "for m in ('math_verify', 'datasets', 'latex2sympy2_extended'): sys.modules[m] = None\n"
        "import pasodoble.dualplay, pasodoble.roles.role, pasodoble.roles.adapters, pasodoble.rollout.factory\n"
        "import pasodoble.rollout.server, pasodoble.grader.extract\n"
        "import runpy; runpy.run_path('bench/gpu_check.py', run_name='gpu_check')\n"
        "try:\n"
        "    from pasodoble.grader import Grader\n"
        "except ImportError:\n"
        "    print('grader needs math-verify')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "grader needs math-verify" in out.stdout
