"""How often ``gpuenergy history`` reports a change where there is none, and how often it finds one that is there.

    python benchmarks/history_false_alarms.py [--quick] [--histories N]

Synthetic histories drawn with the simulator's noise model (``sim/device.py``): each session's
figure moves by a log-normal factor of CV ``noise`` (the simulator's default, ``DEFAULT_NOISE``, is
1.5 % between sessions), and each of a session's three repetitions by a quarter of that on time and
on power. Per history length (6, 20 and 100 commits) and noise level (1.5 %, 3 %, 5 %: real GPUs are
noisier than the default), N histories with no change count as a **false alarm** when the rule
reports a change point, a trend, or an unconfirmed newest run; the same with the 5 % minimum set to
0 shows the statistics alone (they are built for at most 1 % per series at 99 % confidence). Then
N histories with a 30 % step after the middle (and a 10 % one) count as **found** when the rule
names that commit and nothing else. Each history has its own seed: the figures repeat exactly.
"""

from __future__ import annotations

import math
import random
import statistics
import time

import _common as common

from pytest_gpuenergy.history.changes import Settings, find_changes
from pytest_gpuenergy.sim.device import REGION_NOISE_SHARE
from pytest_gpuenergy.sim.nvml import DEFAULT_NOISE

NAME = "history_false_alarms"
REPETITIONS = 3
LENGTHS = (6, 20, 100)
NOISES = (DEFAULT_NOISE, 0.03, 0.05)


def history(length: int, noise: float, seed: int, step_pct: float = 0.0, step_at: int | None = None) -> tuple[list[float], list[float]]:
    """(log means, within-run variance of each log mean) of one synthetic history."""
    rng = random.Random(f"history/{length}/{noise}/{seed}/{step_pct}")
    step_at = length // 2 if step_at is None else step_at
    log_means, within = [], []
    region = noise * REGION_NOISE_SHARE
    for i in range(length):
        level = math.log1p(step_pct / 100.0) if i >= step_at else 0.0
        session = rng.gauss(0.0, noise)
        reps = [math.exp(level + session + rng.gauss(0.0, region) + rng.gauss(0.0, region)) for _ in range(REPETITIONS)]
        mean = statistics.fmean(reps)
        log_means.append(math.log(mean))
        within.append(statistics.variance([r / mean for r in reps]) / REPETITIONS)
    return log_means, within


def alarm_rates(length: int, noise: float, histories: int, settings: Settings) -> dict:
    changes = trends = pending = 0
    for seed in range(histories):
        found = find_changes(*history(length, noise, seed), settings=settings)
        changes += bool(found.changes)
        trends += bool(found.trends)
        pending += found.pending is not None
    return {"change_pct": 100.0 * changes / histories, "trend_pct": 100.0 * trends / histories,
            "pending_pct": 100.0 * pending / histories}


def found_rate(length: int, noise: float, histories: int, step_pct: float) -> float:
    hits = 0
    at = length // 2
    for seed in range(histories):
        found = find_changes(*history(length, noise, seed, step_pct, at))
        hits += [c.index for c in found.changes] == [at] and not found.trends
    return 100.0 * hits / histories


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--histories", type=int, default=None, help="histories per setting (default 2000; 300 with --quick)")
    args = p.parse_args()
    started = time.time()
    histories = args.histories or (300 if args.quick else 2000)
    rows = []
    for length in LENGTHS:
        for noise in NOISES:
            default = alarm_rates(length, noise, histories, Settings())
            bare = alarm_rates(length, noise, histories, Settings(min_change_pct=0.0))
            rows.append({
                "commits": length, "noise_pct": 100 * noise, "histories": histories,
                "false_change_pct": default["change_pct"], "false_trend_pct": default["trend_pct"],
                "false_pending_pct": default["pending_pct"],
                "statistics_alone_change_pct": bare["change_pct"], "statistics_alone_trend_pct": bare["trend_pct"],
                "found_30pct_step_pct": found_rate(length, noise, histories, 30.0),
                "found_10pct_step_pct": found_rate(length, noise, histories, 10.0),
            })
    common.print_table(
        ["commits", "noise %", "false change %", "false trend %", "unconfirmed %", "stats alone: change %",
         "stats alone: trend %", "30 % step found %", "10 % step found %"],
        [[r["commits"], r["noise_pct"], r["false_change_pct"], r["false_trend_pct"], r["false_pending_pct"],
          r["statistics_alone_change_pct"], r["statistics_alone_trend_pct"], r["found_30pct_step_pct"],
          r["found_10pct_step_pct"]] for r in rows],
        title=f"gpuenergy history's rule on {histories} synthetic histories per row (simulator's noise model)")
    default_rows = [r for r in rows if r["noise_pct"] == 100 * DEFAULT_NOISE]
    worst = max(r["false_change_pct"] + r["false_trend_pct"] for r in default_rows)
    print(f"at the simulator's default noise ({100 * DEFAULT_NOISE:g} %): at most {worst:.2f} % of unchanged "
          f"histories show a change point or a trend")
    path = common.write_result(NAME, {
        "description": "share of unchanged synthetic histories (simulator's session noise) where gpuenergy history reports "
                       "a change point, a trend or an unconfirmed newest run; and share of 30 % / 10 % steps found at their commit",
        "model": {"session_noise": "log-normal per session, CV noise_pct", "repetitions": REPETITIONS,
                  "region_noise": f"{REGION_NOISE_SHARE:g} x noise on time and on power per repetition"},
        "rows": rows,
        "goals": [{"goal": "unchanged histories at the simulator's default noise: change points or trends in at most 1 %",
                   "figure": worst, "target": 1.0, "met": worst <= 1.0}],
    }, quick=args.quick, started=started, out_dir=args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
