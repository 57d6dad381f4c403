"""Draw the documentation's pictures from the simulated GPU: ``python docs/images/make_images.py``.

* ``report.png``: the HTML report of a small suite (four workloads at three caps, three saved
  baseline sessions) after one workload got 25 % heavier, screenshot by headless Chromium.
* ``tune-curve.png``: a ResNet-50 training step's ETS and EDP at every cap of the 25 W grid on the
  simulated H100 (one pytest session, the exhaustive sweep), and the settings ``gpuenergy tune``
  measured, drawn with matplotlib.

Everything here is simulated and both pictures say so. The seed is fixed, so the pictures repeat.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
SUITE = '''
import os
import pytest
from pytest_gpuenergy.sim import declare_work

HEAVIER = os.environ.get("HEAVIER", "")
WORK = {  # one step's GPU work, as the reference workloads declare theirs
    "resnet50-train": dict(flops_tf32=1.554e12, bytes=5.1e10, kernels=948),
    "vgg19-train": dict(flops_tf32=9.35e11, bytes=2.0e10, kernels=527),
    "transformer-train": dict(flops_fp32=1.51e12, bytes=4.9e10, kernels=3315),
    "alexnet-train": dict(flops_tf32=2.43e11, flops_fp32=2.25e10, bytes=1.27e10, kernels=281),
}


@pytest.mark.parametrize("workload", sorted(WORK))
def test_step(workload, gpu_power_cap, energy_meter):
    scale = 1.25 if workload == HEAVIER else 1.0
    work = {key: value * scale if key != "kernels" else value for key, value in WORK[workload].items()}
    energy_meter.measure(lambda: declare_work(**work), repeat=3)
'''
TUNED = '''
from pytest_gpuenergy.sim import declare_work


def test_resnet50_train(gpu_power_cap, energy_meter):
    energy_meter.measure(lambda: declare_work(flops_tf32=1.554e12, flops_fp32=7.9e8, bytes=5.1e10, kernels=948), repeat=2)
'''


def env_for(folder: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUENERGY_")}
    env.update(GPUENERGY_BACKEND="sim", GPUENERGY_SIM_STATE=str(folder / "sim"), GPUENERGY_SIM_SEED="7",
               PYTEST_ADDOPTS="-p no:randomly -p no:cacheprovider -p no:benchmark -p no:asyncio")
    env.update(extra)
    return env


def run(args: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode not in ok:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def report_png(folder: Path) -> None:
    (folder / "test_suite.py").write_text(SUITE)
    caps = "--gpu-caps=60%,80%,100%"
    for seed in ("1", "2", "3"):
        run([str(BIN / "pytest"), caps, "--energy-save", "-q"], folder, env_for(folder, GPUENERGY_SIM_SEED=seed))
    run([str(BIN / "pytest"), caps, "--energy-compare", "--energy-fail=ets:5%,edp:10%", "--energy-html=report.html", "-q"],
        folder, env_for(folder, HEAVIER="vgg19-train"), ok=(1,))
    browser = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None)
    if browser is None:
        raise SystemExit("headless Chromium is needed for the report's screenshot")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={folder / 'profile'}", f"--screenshot={HERE / 'report.png'}",
                    "--window-size=1100,1500", (folder / "report.html").as_uri()], capture_output=True, timeout=120, check=True)


def tune_png(folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (folder / "test_tuned.py").write_text(TUNED)
    grid = ",".join(str(w) for w in range(200, 701, 25))
    run([str(BIN / "pytest"), f"--gpu-caps={grid}", "--energy-json=sweep.json", "-q"], folder, env_for(folder))
    run([str(BIN / "gpuenergy"), "tune", "test_tuned.py", "--objective", "both", "--json", "tune.json"], folder, env_for(folder))
    sweep = json.loads((folder / "sweep.json").read_text())
    points = sorted((case["limit_enforced_w"], case["ets_j"], case["edp_js"]) for run_ in sweep["runs"] for case in run_["cases"])
    tuned = json.loads((folder / "tune.json").read_text())            # one object per test and objective
    measured = sorted({float(w) for item in tuned for w in item["measured"]})
    best = {item["objective"]: float(item["setting"]) for item in tuned}

    caps, ets, edp = zip(*points)
    fig, left = plt.subplots(figsize=(7.5, 4.2), dpi=130)
    right = left.twinx()
    left.plot(caps, ets, color="#0072B2", marker="o", markersize=3, label="ETS (J), every 25 W")
    right.plot(caps, edp, color="#D55E00", marker="s", markersize=3, label="EDP (J s), every 25 W")
    for cap in measured:
        left.axvline(cap, color="#999999", linewidth=0.8, linestyle=":")
    left.axvline(best["ets"], color="#0072B2", linewidth=1.5, linestyle="--", label=f"tune's ETS optimum {best['ets']:.0f} W")
    right.axvline(best["edp"], color="#D55E00", linewidth=1.5, linestyle="--", label=f"tune's EDP optimum {best['edp']:.0f} W")
    left.set_xlabel("power cap (W); dotted: the settings tune measured")
    left.set_ylabel("ETS per step (J)")
    right.set_ylabel("EDP per step (J s)")
    left.set_title("ResNet-50 training step, simulated H100 (figures simulated)")
    handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    labels = left.get_legend_handles_labels()[1] + right.get_legend_handles_labels()[1]
    left.legend(handles, labels, fontsize=7, loc="upper center")
    fig.tight_layout()
    fig.savefig(HERE / "tune-curve.png")


def main() -> None:
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        report_png(Path(one))
        tune_png(Path(two))
    print(f"wrote {HERE / 'report.png'} and {HERE / 'tune-curve.png'}")


if __name__ == "__main__":
    main()
