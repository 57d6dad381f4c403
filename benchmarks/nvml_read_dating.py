"""On a real GPU, read-only: can a counter read be dated inside the call, free of the GIL?

    python benchmarks/nvml_read_dating.py          # on a machine with an NVIDIA GPU (NVML)

The meter dates each publication of the energy counter by a bracket of two reads, from the host's
clock before the first and after the second. A read through ctypes releases the GIL for the C call
and must take it back before the host's clock can be read again: on a host whose main thread runs
Python, that wait widens every bracket (the simulator shows it: 2.4 ms reads and a spinning main
thread make the recorder's measured read cost 14.7 ms and its lattice's error 4-10 ms). NVML's
field values carry a ``timestamp`` (microseconds since 1970) taken inside the library. This probe
reads ``NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` from a thread, as the recorder does, with the main
thread idle and then spinning Python, and reports:

* the read's span on the host's clock (median, 99th percentile);
* where the field's timestamp lies in that span (ms after the read began, ms before it ended);
* the brackets around each change of the value, from the host's clock and from the timestamps,
  and how far each bracket's middle lies from a 100 ms lattice fitted to them.

Nothing is set; every NVML setter refuses (``read_only_nvml``).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import _common as common

NAME = "nvml_read_dating"


def read_many(nvml: Any, handle: Any, field: int, seconds: float, pause_s: float = 0.001) -> list[tuple[float, float, float, int, int]]:
    """(began, ended, timestamp, latency_us, value): host epoch seconds for the first three."""
    rows = []
    end = time.time() + seconds
    while time.time() < end:
        began = time.time()
        value = nvml.nvmlDeviceGetFieldValues(handle, [field])[0]
        ended = time.time()
        rows.append((began, ended, value.timestamp / 1e6, int(value.latencyUsec), int(value.value.ullVal)))
        time.sleep(pause_s)
    return rows


def lattice_residuals_ms(middles: list[float], period_s: float = 0.1) -> list[float]:
    """Each bracket middle's distance from the best 100 ms lattice through them (median phase)."""

    def wrapped(offset: float) -> float:   # into [-period/2, period/2): a circle has no 0 edge to fall off
        return (offset + period_s / 2) % period_s - period_s / 2

    if not middles:
        return []
    phase = statistics.median(wrapped(m - middles[0]) for m in middles)
    return [1e3 * wrapped(m - middles[0] - phase) for m in middles]


def summarise(rows: list[tuple[float, float, float, int, int]]) -> dict[str, Any]:
    spans = sorted(1e3 * (e - b) for b, e, *_ in rows)
    inside_after = [1e3 * (t - b) for b, e, t, *_ in rows]
    inside_before_end = [1e3 * (e - t) for b, e, t, *_ in rows]
    host, stamp = [], []
    for prev, cur in zip(rows, rows[1:]):
        if cur[4] != prev[4]:
            host.append((prev[0], cur[1]))
            stamp.append((prev[2], cur[2]))

    def widths(brackets: list[tuple[float, float]]) -> dict[str, float | None]:
        w = sorted(1e3 * (b - a) for a, b in brackets)
        res = [abs(r) for r in lattice_residuals_ms([(a + b) / 2 for a, b in brackets])]
        return {"width_ms_median": statistics.median(w) if w else None, "width_ms_p90": w[int(0.9 * len(w))] if w else None,
                "middle_off_lattice_ms_median": statistics.median(res) if res else None,
                "middle_off_lattice_ms_p90": sorted(res)[int(0.9 * len(res))] if res else None}

    return {"reads": len(rows), "span_ms_median": statistics.median(spans), "span_ms_p99": spans[int(0.99 * len(spans))],
            "timestamp_after_begin_ms_median": statistics.median(inside_after),
            "timestamp_before_end_ms_median": statistics.median(inside_before_end),
            "timestamp_outside_span": sum(1 for a, e in zip(inside_after, inside_before_end) if a < 0 or e < 0),
            "latency_us_median": statistics.median(r[3] for r in rows), "changes": len(host),
            "host_brackets": widths(host), "timestamp_brackets": widths(stamp)}


def recorder_under_load(regions: int = 8, region_s: float = 0.5) -> dict[str, Any]:
    """The meter's own recorder while the main thread spins Python: its measured read cost, its
    lattice's error bound, its reads a second, and the bounds of ``region_s`` regions."""
    from pytest_gpuenergy.gpu.device import open_backend
    from pytest_gpuenergy.meter import EnergyMeter
    from pytest_gpuenergy.meter.recorder import recorders_of

    backend = open_backend("nvml")
    try:
        gpu = backend.select("0")[0]
        meter = EnergyMeter(backend, [gpu])
        with meter:
            time.sleep(0.5)
        recorder = recorders_of(backend).of(gpu)
        since = backend.clock()
        bounds, errors_ms, costs_ms = [], [], []
        for _ in range(regions):
            with meter:
                common.spin_python(region_s)
            r = meter.result
            bounds.append((r.ets_high_j - r.ets_low_j) / 2 / r.ets_j)
            lattice = recorder.learner.lattice
            errors_ms.append(1e3 * lattice.error_at(backend.clock()) if lattice is not None else None)
            costs_ms.append(1e3 * recorder._read_cost_s)
        reads, _ = recorder.snapshot(since, backend.clock())
        return {"region_s": region_s, "bound_half_width_median": statistics.median(bounds), "bound_half_widths": bounds,
                "lattice_error_ms": errors_ms, "measured_read_cost_ms": costs_ms,
                "reads_per_s": len(reads) / (backend.clock() - since)}
    finally:
        backend.close()


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=6.0, help="reading time per condition (default 6 s)")
    args = p.parse_args()
    import pynvml
    import read_only_nvml  # noqa: F401  (every NVML setter refuses: this run only reads)

    started = time.time()
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name, driver = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlSystemGetDriverVersion()
        field = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
        results = {}
        for condition in ("main thread idle", "main thread spinning Python"):
            box: dict[str, Any] = {}
            reader = threading.Thread(target=lambda: box.setdefault("rows", read_many(pynvml, handle, field, args.seconds)))
            reader.start()
            if condition.endswith("Python"):
                while reader.is_alive():
                    common.spin_python(0.05)
            reader.join()
            results[condition] = summarise(box["rows"])
            common.print_table(["figure", "value"], [[k, v] for k, v in results[condition].items()], title=condition)
        results["recorder, main thread spinning Python"] = under_load = recorder_under_load()
        common.print_table(["figure", "value"], [[k, v] for k, v in under_load.items()],
                           title="the meter's recorder, main thread spinning Python")
        counter_mj = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        field_mj = pynvml.nvmlDeviceGetFieldValues(handle, [field])[0].value.ullVal
    finally:
        pynvml.nvmlShutdown()
    path = common.write_result(NAME, {"gpu": {"name": str(name), "driver": str(driver)}, "conditions": results,
                                      "field_minus_counter_mj": int(field_mj) - int(counter_mj)},
                               quick=args.quick, started=started, out_dir=args.out, real_gpu=f"{name}, driver {driver}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
