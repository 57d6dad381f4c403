"""The example scripts in examples/ work as their docstrings say."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_sigkill_demo_leaves_the_gpu_capped_and_restore_repairs_it():
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "sigkill_demo.py")],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    after_kill = out.split("=== after SIGKILL")[1].split("=== gpuenergy restore")[0]
    assert "limit 200 W" in after_kill and "journal: GPU 0" in after_kill
    assert "restored to 700 W" in out
    assert out.rstrip().endswith("OK: the GPU is back at 700 W")
