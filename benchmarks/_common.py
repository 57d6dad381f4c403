"""What every benchmark script shares: arguments, the machine it ran on, result files, tables.

A benchmark script is run as ``python benchmarks/<name>.py [--quick]``. It prints its tables and
writes one JSON document to ``benchmarks/results/<name>.json`` (``<name>-quick.json`` with
``--quick``, so that a quick run never replaces the figures of a full one)::

    {"format": "gpuenergy-benchmark", "version": 1, "benchmark": NAME, "quick": bool,
     "machine": {...machine_info()...}, "simulated": bool, "started": ISO date, "wall_s": float,
     ...the script's own keys (settings, rows)..., "goals": [Goal.record(), ...]}

A benchmark that has goals lists them under ``goals`` (see :class:`Goal`): ``run_all.py`` gathers
every result's list into ``goals[-quick].json`` without knowing the benchmark.

Figures that come from the GPU simulator are labelled "simulated" in the tables and in the JSON
(``machine.gpu`` says "simulated GPU: <model>"); they describe the meter against the simulator's
model, never a real GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
FORMAT = "gpuenergy-benchmark"
FORMAT_VERSION = 1

# The simulator's settings, cleared for a benchmark so that nothing from the caller's shell
# (faults, noise, another machine description) leaks into its figures.
# The plugins the dev install brings for the compatibility matrix, off in every child pytest session
# (as pyproject.toml's addopts turns them off in the suite's own), so each session loads what a plain
# install would: ["-p", "no:randomly", ...].
DEV_PLUGINS_OFF = [arg for name in ("randomly", "asyncio", "benchmark", "syrupy", "regressions", "pytest-datadir",
                                    "dependency", "pytest_mpl", "freezer", "time_machine") for arg in ("-p", f"no:{name}")]
SIM_ENV = ("GPUENERGY_SIM_STATE", "GPUENERGY_SIM_GPUS", "GPUENERGY_SIM_FAULTS", "GPUENERGY_SIM_NOISE",
           "GPUENERGY_SIM_SEED", "GPUENERGY_SIM_COUNTER_READ_MS", "GPUENERGY_SIM_CLOCK")

if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere: the package is importable
    sys.path.insert(0, str(REPO_ROOT))


# -- arguments -----------------------------------------------------------------------------------

def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark has (``--quick``, ``--out``)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a small subset that runs in well under a minute or two")
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help=f"folder for the JSON result (default {RESULTS_DIR})")
    p.add_argument("--seed", type=int, default=0, help="seed for the order of the interleaved cases")
    return p


# -- the machine ---------------------------------------------------------------------------------

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info(simulated_gpus: Sequence[str] | str | None = None, real_gpu: str | None = None) -> dict[str, Any]:
    """Where a benchmark ran. ``simulated_gpus``: the simulated GPU model name(s), if any;
    ``real_gpu``: the real GPU measured (name, driver), if any."""
    if isinstance(simulated_gpus, str):
        simulated_gpus = [simulated_gpus]
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    gpus = list(dict.fromkeys(simulated_gpus or []))
    return {
        "host": platform.node(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "torch": _version("torch"),
        "numpy": _version("numpy"),
        "pytest": _version("pytest"),
        "pytest_gpuenergy": _version("pytest-gpuenergy"),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "load_average_1_5_15min": load,
        "gpu": ("; ".join(f"simulated GPU: {g}" for g in gpus) if gpus
                else f"real GPU: {real_gpu}" if real_gpu else "none (no GPU used)"),
        "simulated": bool(gpus),
    }


def machine_lines(machine: dict[str, Any]) -> list[str]:
    return [
        f"host {machine['host']}: {machine['cpu_model']}, {machine['cpu_usable']}/{machine['cpu_count']} CPUs usable, "
        f"{machine['os']}",
        f"{machine['python']}, torch {machine['torch']}, pytest {machine['pytest']}, {machine['date']}, "
        f"load average {machine['load_average_1_5_15min']}",
        f"GPU: {machine['gpu']}",
    ]


# -- results -------------------------------------------------------------------------------------

def result_path(name: str, quick: bool, out_dir: Path | None = None) -> Path:
    return Path(out_dir or RESULTS_DIR) / f"{name}{'-quick' if quick else ''}.json"


def write_result(
    name: str, payload: dict[str, Any], *, quick: bool, started: float, simulated_gpus: Sequence[str] | None = None,
    out_dir: Path | None = None, real_gpu: str | None = None,
) -> Path:
    """Write the benchmark's JSON document atomically and return its path."""
    machine = machine_info(simulated_gpus, real_gpu)
    document = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "benchmark": name,
        "quick": quick,
        "simulated": machine["simulated"],
        "machine": machine,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "wall_s": round(time.time() - started, 2),
        **payload,
    }
    path = result_path(name, quick, out_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_clean(document), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


# -- goals ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Goal:
    """One goal's figure against its target, as a benchmark writes it in its result's ``goals`` list.

    ``run_all.py`` reads every result's ``goals`` (whatever the benchmark) into ``goals[-quick].json``,
    so a benchmark states its own goals, and which way its figure must lie of the target, in ``met``.
    ``source`` (the result file) and ``reason`` (why a goal has no figure) are filled in by run_all.
    """

    goal: str
    figure: float | None
    target: float | None
    met: bool
    simulated: bool
    text: str = ""               # one line for the summary: what the figure is and what the goal asks
    source: str = ""
    reason: str = ""

    def record(self) -> dict[str, Any]:
        """The JSON object: ``goal``, ``figure``, ``target``, ``met``, ``simulated`` and what else is known."""
        out: dict[str, Any] = {"goal": self.goal, "figure": self.figure, "target": self.target, "met": self.met,
                               "simulated": self.simulated}
        out.update({key: value for key, value in (("text", self.text), ("source", self.source),
                                                    ("reason", self.reason)) if value})
        return out


# -- tables --------------------------------------------------------------------------------------

def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None) -> str:
    """A plain-text table; numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    numeric = [all(_is_number(r[i]) for r in cells) if cells else False for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [title] if title else []
    out += [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None) -> None:
    print(format_table(headers, rows, title=title), flush=True)
    print(flush=True)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"
    return str(value)


def _is_number(text: str) -> bool:
    try:
        float(text.rstrip("%"))
        return True
    except ValueError:
        return text == "-"


def pct(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * 100:.{digits}f}%"


# -- statistics ----------------------------------------------------------------------------------

def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (q in [0, 1])."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


# -- the simulator -------------------------------------------------------------------------------

@contextlib.contextmanager
def private_sim(models: str = "H100", faults: str = "", counter_read_ms: str = "0",
                clock: str = "wall") -> Iterator[Path]:
    """A fresh simulated machine in a temporary folder, with the caller's sim settings set aside.

    While it is open ``open_backend("sim")`` (and pytest runs started with this environment) see
    only this machine: ``models`` (e.g. "H100" or "K80") with the ``faults`` given
    (``GPUENERGY_SIM_FAULTS`` syntax), energy-counter reads taking ``counter_read_ms``, no noise,
    on the host's clock by default (the meter's benchmarks measure it in real time, GIL and all;
    ``clock="virtual"`` for the simulator's own).
    """
    saved = {name: os.environ.get(name) for name in SIM_ENV}
    with tempfile.TemporaryDirectory(prefix="gpuenergy-bench-") as folder:
        for name in SIM_ENV:
            os.environ.pop(name, None)
        os.environ["GPUENERGY_SIM_STATE"] = str(Path(folder) / "sim-state")
        os.environ["GPUENERGY_SIM_GPUS"] = models
        if faults:
            os.environ["GPUENERGY_SIM_FAULTS"] = faults
        os.environ["GPUENERGY_SIM_COUNTER_READ_MS"] = counter_read_ms
        os.environ["GPUENERGY_SIM_CLOCK"] = clock
        os.environ["GPUENERGY_SIM_NOISE"] = "0"
        try:
            yield Path(folder)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


# -- work that stands for GPU work on the simulator ----------------------------------------------

def spin_python(seconds: float) -> None:
    """Pure-Python busy loop for ``seconds`` of process CPU time (holds the GIL)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def python_work(iterations: int) -> int:
    """A fixed amount of pure-Python work (holds the GIL); returns a checksum."""
    total = 0
    for i in range(iterations):
        total += i * i & 7
    return total


class TorchWork:
    """A fixed amount of torch work: ``calls`` square float32 matmuls (they release the GIL).

    torch runs on one intra-op thread here: with two, a matmul's threads wait for each other at
    every barrier, and on a small shared machine one descheduled thread stalls both, which makes
    wall times far noisier than the meter's effect on them. One thread also leaves a core for the
    meter's own thread, as a GPU leaves the CPU free.
    """

    def __init__(self, size: int = 192, threads: int = 1) -> None:
        import torch  # imported only by benchmarks that use it: 1.8 s

        torch.set_num_threads(threads)
        self.torch = torch
        generator = torch.Generator().manual_seed(0)
        self.a = torch.randn(size, size, generator=generator)
        self.b = torch.randn(size, size, generator=generator)
        self.out = torch.empty(size, size)

    def run(self, calls: int) -> None:
        mm, a, b, out = self.torch.mm, self.a, self.b, self.out
        for _ in range(calls):
            mm(a, b, out=out)

    def spin(self, seconds: float) -> None:
        """Matmuls for ``seconds`` of wall time."""
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            self.run(4)


def calibrate(run: Any, target_s: float, *, start: int = 1000, clock: Any = time.perf_counter) -> int:
    """How many units ``run(n)`` needs to take about ``target_s`` seconds (median of 3 timings)."""
    n = start
    while True:
        t = clock(); run(n); elapsed = clock() - t
        if elapsed >= 0.05:
            break
        n *= 4
    rates = []
    for _ in range(3):
        t = clock(); run(n); rates.append(n / max(clock() - t, 1e-9))
    return max(1, round(statistics.median(rates) * target_s))
