"""Watch a killed run leave a (simulated) GPU capped, and `gpuenergy restore` put it back.

    python examples/sigkill_demo.py

It runs on a private simulated machine in a temporary folder (your own GPUs and your own
simulated machine are not touched): a pytest run caps the GPU at its lowest limit and is killed
with SIGKILL in the middle of the test, so no fixture teardown can run; `gpuenergy info` then
shows the GPU still capped and the journal entry; `gpuenergy restore` repairs it from the
journal; `gpuenergy info` shows the previous limit again. Everything here is simulated.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

CAPPED_TEST = textwrap.dedent(
    """
    import pathlib, time

    def test_long_training_step(gpu_power_cap):
        pathlib.Path("capped").write_text(str(gpu_power_cap.enforced_w))
        time.sleep(60)   # killed long before this ends
    """
)


def gpuenergy(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest_gpuenergy.cli", *args], capture_output=True, text=True)
    return (proc.stdout + proc.stderr).rstrip()


def step(title: str) -> None:
    print(f"\n=== {title}")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="gpuenergy-demo-") as folder:
        work = Path(folder)
        os.environ["GPUENERGY_SIM_STATE"] = str(work / "sim-state")
        os.environ["GPUENERGY_SIM_GPUS"] = "H100"
        (work / "test_capped.py").write_text(CAPPED_TEST)

        step("before: the simulated GPU at its default limit")
        print(gpuenergy("info", "--gpu-backend=sim"))

        step("a pytest run caps it at its lowest limit (--gpu-caps=min) ...")
        run = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpu-caps=min", "test_capped.py"],
            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        deadline = time.monotonic() + 60
        while not (work / "capped").exists():
            if time.monotonic() > deadline or run.poll() is not None:
                print(run.communicate()[0])
                return 1
            time.sleep(0.05)
        print(f"capped at {(work / 'capped').read_text()} W; now: kill -9 {run.pid}")
        run.send_signal(signal.SIGKILL)
        run.wait()

        step("after SIGKILL: no teardown ran, the GPU is still capped, the journal says so")
        print(gpuenergy("info", "--gpu-backend=sim"))

        step("gpuenergy restore")
        print(gpuenergy("restore", "--gpu-backend=sim"))

        step("after restore: back at the previous limit, nothing pending")
        after = gpuenergy("info", "--gpu-backend=sim")
        print(after)
        ok = "limit 700 W" in after and "journal:" not in after
        print("\nOK: the GPU is back at 700 W" if ok else "\nFAILED: the GPU was not restored")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
