"""What ``--energy-all`` adds to a suite's wall time: 600 short plain tests, and the main job.

    python benchmarks/energy_all_overhead.py [--quick] [--pairs N] [--parts] [--backend sim|nvml]

* **600 plain tests of about 5 ms each** (5 ms of CPU: on the simulated GPU the CPU time of a
  measured region stands for GPU work), in one pytest process, with ``--energy-all`` and without it;
* **the main job** (``pytest reference_workloads --gpu-caps=60%,80%,100%``, whose tests measure
  with ``energy_meter`` already), with ``--energy-all`` and without it (not with ``--quick``).

After one untimed run of each (the first process fills the bytecode cache), each pair runs the
two commands back to back in fresh processes, alternating which goes first (ABBA), and the figure
is the median over the pairs of with / without - 1, in wall time (the CPU time of the same runs
beside it: on a host shared with other work the wall time follows their
load, the CPU time much less). The goals (issue 25):
at most 10 % for the short tests, at most 2 % for the main job. The simulated GPU runs on its
virtual clock: every test starts its world over (``SimulatedNvml.simBeginTest``), which a real GPU
does not, and which costs CPU here. A one-test suite, timed the same way, splits the added time
into what a session pays once (the plugin's start and end, and the modules only ``--energy-all``
imports) and what each test pays: the first is a floor no per-test design goes under. The 600 tests
are also timed with ``--energy-all`` and the GPU work made free (``free_meter.py``: no lock, no
hand-over, no region, no figure): what the plugin's pytest glue costs by itself, the floor of the
per-test part while a test is measured through pytest's fixtures and hooks.

The plugin's modules are compiled first, into the temporary folder (``compileall``,
``PYTHONPYCACHEPREFIX``), as pip compiles an installed package's: a checkout run with
``PYTHONDONTWRITEBYTECODE=1`` (this project's development machines) would compile them in every
process, and only the runs with ``--energy-all`` import most of them. ``--no-bytecode-cache`` times
it that way (the figures before 2026-11-27).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as common

NAME = "energy_all_overhead"
SHORT_GOAL = 0.10
MAIN_JOB_GOAL = 0.02
_OFF = [*common.DEV_PLUGINS_OFF, "-p", "no:cacheprovider", "-p", "no:hypothesispytest"]


def short_suite(folder: Path, count: int = 600, seconds: float = 0.005, name: str = "test_short.py") -> None:
    """``count`` tests, each spinning for ``seconds`` of its own thread's CPU time: the simulator takes
    that as the GPU's work; on a real GPU the recorder's thread uses CPU too (0.05-0.14 s a second on
    the H200), and a spin on the process's CPU time, as until 2026-11-28, ended that much sooner with
    the plugin than without it."""
    lines = ["import time", "", "def spin(seconds):", "    end = time.thread_time() + seconds",
             "    while time.thread_time() < end:", "        pass", ""]
    for i in range(count):
        lines += [f"def test_short_{i:03d}():", f"    spin({seconds})", ""]
    (folder / name).write_text("\n".join(lines), encoding="utf-8")


def split(short: dict, single: dict, count: int = 600) -> dict:
    """What ``--energy-all`` adds once a session (the added wall time of a one-test suite: the plugin's
    start, its end, its imports) and per test (the rest, over the other tests), from the medians of
    each pair's added time: the floor a per-test design cannot go under is the first."""
    added_s = statistics.median(w - o for w, o in zip(short["with_s"], short["without_s"]))
    once_s = statistics.median(w - o for w, o in zip(single["with_s"], single["without_s"]))
    without_s = statistics.median(short["without_s"])
    return {"once_s": once_s, "once_share": once_s / without_s, "per_test_ms": (added_s - once_s) / (count - 1) * 1000.0,
            "single": single}


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """The run's wall time and its CPU time (user and system, the process and its children), in s:
    on a host shared with other work the wall time follows their load, the CPU time much less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compile_plugin(env: dict[str, str]) -> None:
    """Compile the plugin's modules into ``env``'s ``PYTHONPYCACHEPREFIX``, as pip does at install."""
    package = Path(common.REPO_ROOT) / "pytest_gpuenergy"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], env=env, check=True, timeout=600)


def ratio(base: list[str], cwd: Path, env: dict[str, str], pairs: int) -> dict:
    """Median over ABBA pairs of (with --energy-all) / (without) - 1 in wall time (the goal's figure)
    and in CPU time, and every timing.

    Each command runs once untimed first: in the fresh ``PYTHONPYCACHEPREFIX`` the first process
    compiles every module it imports (pytest's, numpy's, torch's), and until 2026-11-28 that first
    process was always a run with ``--energy-all`` (the main job's: 27.5 s against 21 s for each run
    after it, which made its 2-pair figure +11.2 % where it is about +1.5 %)."""
    warm_up_s = [timed(base + (["--energy-all"] if energy_all else []), cwd, env)[0] for energy_all in (True, False)]
    with_s, without_s, ratios, with_cpu_s, without_cpu_s, cpu_ratios = [], [], [], [], [], []
    for pair in range(pairs):
        order = (True, False) if pair % 2 == 0 else (False, True)
        took = {}
        for energy_all in order:
            took[energy_all] = timed(base + (["--energy-all"] if energy_all else []), cwd, env)
        with_s.append(took[True][0])
        without_s.append(took[False][0])
        ratios.append(took[True][0] / took[False][0] - 1)
        with_cpu_s.append(took[True][1])
        without_cpu_s.append(took[False][1])
        cpu_ratios.append(took[True][1] / took[False][1] - 1)
    return {"overhead": statistics.median(ratios), "with_s": with_s, "without_s": without_s, "pairs": pairs, "warm_up_s": warm_up_s,
            "cpu_overhead": statistics.median(cpu_ratios), "with_cpu_s": with_cpu_s, "without_cpu_s": without_cpu_s}


def parts(command: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """One run with ``--energy-all`` and one without, each under ``energy_all_parts.py``: per test, the
    time of pytest's setup, call and teardown, and of the plugin's parts (with only)."""
    found = {}
    for energy_all in (True, False):
        out = cwd / f"parts-{energy_all}.json"
        part_env = {**env, "GPUENERGY_PARTS_OUT": str(out),
                    "PYTHONPATH": os.pathsep.join([str(common.BENCH_DIR), env.get("PYTHONPATH", "")])}
        subprocess.run([*command, "-p", "energy_all_parts", *(["--energy-all"] if energy_all else [])], cwd=cwd,
                       env=part_env, capture_output=True, text=True, timeout=1800, check=True)
        document = json.loads(out.read_text(encoding="utf-8"))
        tests = max(document["tests"], 1)
        found["with" if energy_all else "without"] = {
            label: {"calls_per_test": part["calls"] / tests, "us_per_test": part["total_s"] / tests * 1e6}
            for label, part in document["parts"].items()}
    return found


def print_parts(row: dict) -> None:
    with_parts, without_parts = row["parts"]["with"], row["parts"]["without"]
    common.print_table(
        ["part", "calls a test", "us a test", "without --energy-all"],
        [[label, f"{part['calls_per_test']:.2f}", f"{part['us_per_test']:.0f}",
          f"{without_parts[label]['us_per_test']:.0f}" if label in without_parts else ""]
         for label, part in with_parts.items()],
        title=f"{row['suite']}: where the time goes (one run each way; parts nest, so they do not add up)")


def real_gpu_name() -> str:
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return f"{pynvml.nvmlDeviceGetName(handle)}, driver {pynvml.nvmlSystemGetDriverVersion()}"
    finally:
        pynvml.nvmlShutdown()


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=None, help="pairs of runs per figure (default 5, --quick 3)")
    p.add_argument("--no-bytecode-cache", action="store_true",
                   help="compile the plugin's modules in every process (PYTHONDONTWRITEBYTECODE=1), as before 2026-11-27")
    p.add_argument("--parts", action="store_true",
                   help="also run the 600 tests once more each way under energy_all_parts.py: where the added time goes")
    p.add_argument("--backend", default="sim", choices=("sim", "nvml"),
                   help="sim (default: the simulated GPU) or nvml (a real GPU, read-only: no caps; every NVML setter refuses)")
    args = p.parse_args()
    cached = not args.no_bytecode_cache
    real = args.backend == "nvml"
    pairs = args.pairs or (3 if args.quick else 5)
    started = time.time()
    rows, goals = [], []
    with tempfile.TemporaryDirectory() as folder:
        where = Path(folder)
        short_suite(where)
        env = {**os.environ, "GPUENERGY_SIM_STATE": str(where / "sim"), "GPUENERGY_BACKEND": args.backend,
               "GPUENERGY_SIM_SEED": "1"}
        env.pop("PYTEST_ADDOPTS", None)
        safety: list[str] = []
        if real:   # every NVML setter refuses (benchmarks/read_only_nvml.py), though no cap is asked for
            env["PYTHONPATH"] = os.pathsep.join([str(common.BENCH_DIR), env.get("PYTHONPATH", "")])
            safety = ["-p", "read_only_nvml"]
        if cached:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(where / "bytecode")
            compile_plugin(env)
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        short_suite(where, count=1, name="test_one.py")
        short = ratio([sys.executable, "-m", "pytest", "-q", *_OFF, *safety, "test_short.py"], where, env, pairs)
        single = ratio([sys.executable, "-m", "pytest", "-q", *_OFF, *safety, "test_one.py"], where, env, pairs)
        where_run = "a real GPU" if real else "simulated GPU"
        rows.append({"suite": f"600 tests of 5 ms ({where_run})", **short, "goal": SHORT_GOAL, **split(short, single)})
        goals.append({"goal": "energy_all_overhead" + ("_real_gpu" if real else ""), "figure": short["overhead"],
                      "target": SHORT_GOAL, "met": short["overhead"] <= SHORT_GOAL, "simulated": not real})
        # the glue alone (free_meter.py): the floor of the per-test part
        floor_env = {**env, "PYTHONPATH": os.pathsep.join([str(common.BENCH_DIR), env.get("PYTHONPATH", "")])}
        rows[-1]["floor"] = ratio([sys.executable, "-m", "pytest", "-q", *_OFF, *safety, "-p", "free_meter", "test_short.py"],
                                  where, floor_env, pairs)
        if args.parts:
            rows[-1]["parts"] = parts([sys.executable, "-m", "pytest", "-q", *_OFF, *safety, "test_short.py"], where, env)
        if not args.quick and not real:
            main_job = ratio([sys.executable, "-m", "pytest", "-q", *_OFF, "reference_workloads", "--gpu-caps=60%,80%,100%"],
                             common.REPO_ROOT, env, max(1, pairs // 2))
            rows.append({"suite": "the main job, 54 cases (simulated GPU)", **main_job, "goal": MAIN_JOB_GOAL})
            goals.append({"goal": "energy_all_overhead_main_job", "figure": main_job["overhead"], "target": MAIN_JOB_GOAL,
                          "met": main_job["overhead"] <= MAIN_JOB_GOAL, "simulated": True})
    common.print_table(
        ["suite", "without s (median)", "with --energy-all s (median)", "added", "CPU added", "goal", "met"],
        [[r["suite"], statistics.median(r["without_s"]), statistics.median(r["with_s"]), f"{r['overhead']:+.1%}",
          f"{r['cpu_overhead']:+.1%}", f"<= {r['goal']:.0%}", r["overhead"] <= r["goal"]] for r in rows],
        title=f"--energy-all: wall time added ({pairs} ABBA pairs, fresh processes)")
    for r in rows:
        if "parts" in r:
            print_parts(r)
        if "floor" in r:
            floor = r["floor"]
            print(f"{r['suite']}: the plugin's pytest glue alone (--energy-all with no lock, hand-over, region or figure: "
                  f"free_meter.py) {floor['overhead']:+.1%} ({statistics.median(floor['with_s']):.2f} s against "
                  f"{statistics.median(floor['without_s']):.2f} s), of the {r['overhead']:+.1%} in all")
        if "once_s" in r:
            print(f"{r['suite']}: {r['once_s']:.2f} s once a session ({r['once_share']:+.1%} of the suite: the plugin's "
                  f"start, end and imports, from a one-test suite) and {r['per_test_ms']:.2f} ms a test")
    path = common.write_result(NAME + ("_real_gpu" if real else ""), {"description": __doc__.splitlines()[0], "rows": rows, "goals": goals,
                                      "bytecode": "compiled first (compileall)" if cached else "compiled in every process"},
                               quick=args.quick, started=started, out_dir=args.out,
                               simulated_gpus=None if real else ["NVIDIA H100 80GB HBM3 (simulated)"],
                               real_gpu=real_gpu_name() if real else None)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
