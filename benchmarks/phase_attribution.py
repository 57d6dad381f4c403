"""How well the phase attribution finds each phase's energy, against a synthetic truth, and how long
a region a 10 % bound needs (issue 33).

SIMULATED: a synthetic counter, not the GPU simulator and not a real GPU. A call is a training
step of four phases: forward (L), backward (2 L), update (L) and the host's time between them,
``other`` (L, unmarked), drawing 450, 600, 300 and 90 W (an H100 busy, and idle at 90 W), for
L = 2, 5, 10 and 50 ms. Calls run back to back, with :func:`alignment_gap_s`'s idle gap (phase
"gap") after each where the counter would otherwise publish at the same point of every call.
Each occurrence of a phase draws its own mean power (relative spread 0 or 2 %) and lasts its
length with a 1 % spread. The counter publishes its cumulative energy every 100 ms (NVML) or 1 ms
(AMD SMI), floored to 1 mJ (15.3 uJ), each publication dated within 0.1 ms (a common offset plus a
per-publication error). The region's ETS is exact between its first and last publication and off
by up to 5 % of the energy of its two edges (bound: 10 % of it), as the meter's extrapolation is.

For each case: :func:`region_time_needed_s` (the length a 10 % bound on every phase needs), then
seeded regions of 1, 5 and 30 s (not 30 s with ``--quick``) and of that length (capped at ``--cap-s``): per phase, the median and 99th
percentile of |fitted / true - 1| of its energy per call, how often its bound holds the truth, the
median bound's half-width (share of its energy), and how often it was flagged "cannot tell apart".
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import _common as common
import numpy as np

from pytest_gpuenergy.meter.attribution import OTHER, Attribution, attribute_phases
from pytest_gpuenergy.meter.phase_design import alignment_gap_s, region_time_needed_s

NAME = "phase_attribution"
LENGTHS_S = (0.002, 0.005, 0.01, 0.05)
COUNTERS = {"NVML 100 ms": (0.1, 0.001), "AMD SMI 1 ms": (0.001, 15.3e-6)}
NOISES = (0.0, 0.02)
MAX_POWER_W = 700.0
DATING_S = 1e-4


def step(length_s: float) -> list[tuple[str, float, float]]:
    """One training step: (phase, length_s, power_w); ``other`` is the host's time, left unmarked."""
    return [("forward", length_s, 450.0), ("backward", 2 * length_s, 600.0), ("update", length_s, 300.0),
            (OTHER, length_s, 90.0)]


@dataclass(frozen=True)
class SyntheticRegion:
    """What the meter would hand the attribution for a region of known truth."""

    times_s: np.ndarray
    energies_j: np.ndarray
    dating_error_s: float
    resolution_j: float
    timeline: list[tuple[str, float, float]]
    t0_s: float
    t1_s: float
    calls: int
    ets_j: float
    ets_low_j: float
    ets_high_j: float
    truth_j: dict[str, float]           # each phase's true energy per call

    def attribute(self, **options: float) -> Attribution:
        return attribute_phases(self.times_s, self.energies_j, self.timeline, t0_s=self.t0_s, t1_s=self.t1_s,
                                ets_j=self.ets_j, ets_low_j=self.ets_low_j, ets_high_j=self.ets_high_j,
                                calls=self.calls, max_power_w=MAX_POWER_W, dating_error_s=self.dating_error_s,
                                resolution_j=self.resolution_j, **options)


def synthetic_region(
    phases: Sequence[tuple[str, float, float]], *, region_s: float, period_s: float, seed: int,
    power_noise: float = 0.0, length_jitter: float = 0.01, dating_error_s: float = DATING_S,
    resolution_j: float = 0.001, gap: bool = True, idle_power_w: float = 90.0,
) -> SyntheticRegion:
    """Back-to-back calls of ``phases`` (the one named ``other`` unmarked) for about ``region_s``, under
    a counter of ``period_s``: the publications, the timeline and the truth, all from ``seed``."""
    rng = np.random.default_rng(seed)
    names = [p[0] for p in phases]
    call_s = sum(p[1] for p in phases)
    gap_s = alignment_gap_s(call_s, period_s) if gap else 0.0
    if gap_s > 0:
        phases = [*phases, ("gap", gap_s, idle_power_w)]
        names.append("gap")
    calls = max(1, round(region_s / (call_s + gap_s)))
    lengths = np.array([p[1] for p in phases])[None, :] * np.clip(
        1 + length_jitter * rng.standard_normal((calls, len(phases))), 0.1, None)
    powers = np.clip(np.array([p[2] for p in phases])[None, :] * (                 # no GPU draws above its maximum
        1 + power_noise * rng.standard_normal((calls, len(phases)))), 0.0, MAX_POWER_W)
    ends = np.cumsum(lengths.ravel())
    starts = ends - lengths.ravel()
    cumulative = np.concatenate(([0.0], np.cumsum((lengths * powers).ravel())))
    t0, t1 = 0.0, float(ends[-1 - (1 if gap_s > 0 else 0)])      # the region ends with the last call, not its gap
    edges = np.concatenate(([0.0], ends))

    def energy_at(moments: np.ndarray) -> np.ndarray:
        inside = np.clip(moments, 0.0, ends[-1])
        i = np.clip(np.searchsorted(edges, inside, side="right") - 1, 0, len(starts) - 1)
        rate = powers.ravel()[i]
        e = cumulative[i] + rate * (inside - edges[i])
        return e + idle_power_w * (np.clip(moments, ends[-1], None) - ends[-1]) - idle_power_w * np.clip(-moments, 0, None)

    true_times = np.arange(-period_s + rng.uniform(0, period_s), t1 + 2 * period_s, period_s)
    common_offset = rng.uniform(-dating_error_s / 2, dating_error_s / 2)
    dated = true_times + common_offset + rng.uniform(-dating_error_s / 2, dating_error_s / 2, len(true_times))
    start_j = 1000.0 + rng.uniform(0, 1000)                 # a counter that has run for a while
    counts = np.floor((start_j + energy_at(true_times)) / resolution_j) * resolution_j
    which = np.tile(np.arange(len(phases)), calls)
    in_region = ends <= t1 + 1e-12
    timeline = [(names[j], float(s), float(e)) for j, s, e in zip(which, starts, ends) if names[j] != OTHER]
    truth = {name: float((lengths * powers)[:, j][:calls].sum()) / calls for j, name in enumerate(names)}
    if gap_s > 0:          # the last call's gap lies after the region
        last = (lengths * powers)[-1, -1]
        truth["gap"] = (truth["gap"] * calls - last) / calls
    exact_j = float(sum(truth[n] for n in names)) * calls
    assert abs(exact_j - float(energy_at(np.array([t1]))[0])) < 1e-6 * exact_j and in_region.sum() >= 1
    # The meter's ETS is exact between the first and last publication inside the region and
    # extrapolated over the two edges: here off by up to 5 % of the edges' energy, bounded by 10 %.
    inside = true_times[(true_times > t0) & (true_times < t1)]
    edges_j = exact_j - float(np.diff(energy_at(inside[[0, -1]]))[0]) if len(inside) >= 2 else exact_j
    ets_j = exact_j + rng.uniform(-0.05, 0.05) * edges_j
    return SyntheticRegion(dated, counts, dating_error_s, resolution_j, timeline, t0, t1, calls, ets_j,
                           exact_j - 0.1 * edges_j, exact_j + 0.1 * edges_j, truth)


def score(region: SyntheticRegion, result: Attribution) -> dict[str, dict[str, float]]:
    """Per phase: the fit's relative error, whether its bound holds the truth, its relative half-width."""
    out = {}
    for phase in result.phases:
        truth = region.truth_j[phase.name]
        out[phase.name] = {
            "error": phase.ets_j / truth - 1,
            "held": float(phase.ets_low_j <= truth <= phase.ets_high_j),
            "half_width": (phase.ets_high_j - phase.ets_low_j) / 2 / truth,
            "flagged": float(not phase.told_apart),
        }
    return out


def run_case(counter: str, length_s: float, noise: float, region_s: float, seeds: int) -> dict:
    period_s, resolution_j = COUNTERS[counter]
    per_phase: dict[str, list[dict[str, float]]] = {}
    sums = []
    for seed in range(seeds):
        region = synthetic_region(step(length_s), region_s=region_s, period_s=period_s, seed=seed,
                                  power_noise=noise, resolution_j=resolution_j)
        result = region.attribute()
        sums.append(abs(sum(p.ets_j for p in result.phases) * region.calls / region.ets_j - 1))
        for name, figures in score(region, result).items():
            per_phase.setdefault(name, []).append(figures)
    phases = {}
    for name, rows in per_phase.items():
        errors = [abs(r["error"]) for r in rows]
        phases[name] = {
            "median_abs_error": common.median(errors), "p99_abs_error": common.quantile(errors, 0.99),
            "bound_holds_share": sum(r["held"] for r in rows) / len(rows),
            "median_half_width": common.median([r["half_width"] for r in rows]),
            "flagged_share": sum(r["flagged"] for r in rows) / len(rows),
        }
    return {"counter": counter, "phase_length_s": length_s, "power_noise": noise, "region_s": region_s,
            "seeds": seeds, "max_sum_error": max(sums), "phases": phases}


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=None, help="regions per case (default 100, quick 20)")
    p.add_argument("--cap-s", type=float, default=120.0, help="longest region simulated (default 120 s)")
    args = p.parse_args()
    started = time.time()
    seeds = args.seeds or (20 if args.quick else 100)
    print("SIMULATED: a synthetic energy counter with a known truth (no GPU, not the GPU simulator)\n")
    needed_rows, rows = [], []
    for counter, (period_s, resolution_j) in COUNTERS.items():
        for noise in NOISES:
            for length_s in LENGTHS_S:
                phases = {n: s for n, s, _ in step(length_s)}
                powers = {n: w for n, _, w in step(length_s)}
                needed_s = region_time_needed_s(phases, powers, period_s, 0.10, power_noise=noise,
                                                dating_error_s=DATING_S, resolution_j=resolution_j)
                gap_s = alignment_gap_s(sum(phases.values()), period_s)
                needed_rows.append({"counter": counter, "power_noise": noise, "phase_length_s": length_s,
                                    "gap_s": gap_s, "region_needed_s": needed_s})
                lengths_s = {1.0, 5.0, min(max(needed_s, 0.8), args.cap_s)} | (set() if args.quick else {30.0})
                for region_s in sorted(lengths_s):
                    rows.append(run_case(counter, length_s, noise, region_s, seeds))
    common.print_table(
        ["counter", "noise", "phase L ms", "gap ms", "region for 10 % (s)"],
        [[r["counter"], common.pct(r["power_noise"], 0), r["phase_length_s"] * 1000, r["gap_s"] * 1000,
          r["region_needed_s"]] for r in needed_rows],
        title="Region length a 10 % bound on every phase needs (region_time_needed_s; simulated design)")
    table = []
    for r in rows:
        for name, f in r["phases"].items():
            table.append([r["counter"], common.pct(r["power_noise"], 0), r["phase_length_s"] * 1000, r["region_s"],
                          name, common.pct(f["median_abs_error"], 1), common.pct(f["p99_abs_error"], 1),
                          common.pct(f["bound_holds_share"], 0), common.pct(f["median_half_width"], 1),
                          common.pct(f["flagged_share"], 0)])
    common.print_table(["counter", "noise", "L ms", "region s", "phase", "median |err|", "p99 |err|", "bound holds",
                        "half-width", "flagged"], table,
                       title=f"The fit against the truth over {seeds} seeds per row (SIMULATED counter)")
    held = [f["bound_holds_share"] for r in rows for f in r["phases"].values()]
    worst_sum = max(r["max_sum_error"] for r in rows)
    print(f"bounds held the truth in {min(held):.0%} to {max(held):.0%} of regions per phase and case; "
          f"phases' sum vs ETS: at most {worst_sum:.1e} relative")
    path = common.write_result(NAME, {
        "description": "phase attribution against a synthetic truth (simulated counter); see the script's docstring",
        "settings": {"seeds": seeds, "cap_s": args.cap_s, "dating_error_s": DATING_S, "max_power_w": MAX_POWER_W,
                     "step": "forward L 450 W, backward 2L 600 W, update L 300 W, other L 90 W",
                     "counters": {k: {"period_s": v[0], "resolution_j": v[1]} for k, v in COUNTERS.items()}},
        "region_needed": needed_rows, "rows": rows,
    }, quick=args.quick, started=started, simulated_gpus=["synthetic energy counter (NVML 100 ms, AMD SMI 1 ms)"],
        out_dir=args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
