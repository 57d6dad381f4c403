"""How well ``measure(step, by_op=True)`` splits a step's energy among operator classes, against the
GPU simulator's truth, for a few region lengths (issue 33, operator classes).

SIMULATED: the GPU simulator, not a real GPU. The step is a transformer block's training step
(layer norm, attention with 16 heads, a feed-forward pair of products; width 2048, batch 8 x 1024
tokens, FP32, SGD) on ``meta`` tensors: each PyTorch operation runs on the simulated GPU as its own
piece of work (``sim/op_work.py``), with the simulator's default noise (1.5 %, drawn per region).
The truth of a class is the simulator's exact energy between its marks. Per region length
(``min_time_s``) and noise draw: each class's error, its bound's half-width, whether the bound
holds the truth, and whether the fit told it apart. On a simulated H100 (NVML's 100 ms counter)
and, without ``--quick``, a simulated MI300X (AMD SMI).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import _common as common

sys.path.insert(0, str(common.REPO_ROOT / "tests"))

from helpers import marks_truth_j  # noqa: E402

NAME = "op_classes"
DRAWS = 3
CASES = {"H100": (1.0, 2.0, 4.0), "MI300X": (2.0,)}
QUICK_CASES = {"H100": (2.0,)}


def block_step() -> Any:
    """The transformer block's training step on meta tensors (shapes only)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.norm, self.norm2, self.heads = nn.LayerNorm(d), nn.LayerNorm(d), heads
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, t, d = x.shape
            q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for y in self.qkv(self.norm(x)).chunk(3, -1))
            x = x + self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
            return x + self.down(F.gelu(self.up(self.norm2(x))))

    model = Block(2048, 16).to("meta")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 1024, 2048, device="meta")

    def step() -> None:
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return step


def run_region(backend: Any, gpu: Any, label: str, min_time_s: float) -> dict[str, Any]:
    from pytest_gpuenergy.meter import EnergyMeter

    backend.begin_test(label, [gpu])            # the noise of this draw: from the seed and the label
    meter = EnergyMeter(backend, [gpu])
    started = time.perf_counter()
    result = meter.measure(block_step(), min_time_s=min_time_s, by_op=True)
    library = getattr(gpu, "amdsmi", None) or gpu.nvml
    assert meter.last_region is not None
    (t0, t1), calls = meter.last_region, result.repetitions[-1].calls
    truth = marks_truth_j(library, gpu.handle, meter, calls, "idle")
    classes = {}
    for name, figure in (result.op_classes or {}).items():
        true_j = truth[name]
        classes[name] = {"ets_j": figure.ets_j, "true_j": true_j, "time_share": figure.time_share,
                         "error": figure.ets_j / true_j - 1 if true_j > 0 else None,
                         "half_width": (figure.ets_high_j - figure.ets_low_j) / 2 / true_j if true_j > 0 else None,
                         "holds": figure.ets_low_j <= true_j <= figure.ets_high_j,
                         "told_apart": figure.distinguishable, "why_not": figure.why_not}
    return {"region_s": t1 - t0, "calls": calls, "ets_j": result.ets_j, "classes": classes,
            "sum_error": abs(sum(f.ets_j for f in (result.op_classes or {}).values()) / result.ets_j - 1),
            "pieces_per_call": len(meter.last_op_marks) / calls, "host_s": time.perf_counter() - started}


def main() -> None:
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    started = time.time()
    print("SIMULATED: the GPU simulator (no real GPU)\n")
    rows: list[dict[str, Any]] = []
    from pytest_gpuenergy.gpu.device import open_backend

    for model, lengths in (QUICK_CASES if args.quick else CASES).items():
        with common.private_sim(model, clock="virtual"):
            os.environ.pop("GPUENERGY_SIM_NOISE", None)         # the simulator's default noise
            os.environ["GPUENERGY_SIM_SEED"] = str(args.seed)
            backend = open_backend("sim")
            gpu = backend.select(None)[0]
            for min_time_s in lengths:
                for draw in range(1 if args.quick else DRAWS):
                    row = run_region(backend, gpu, f"{NAME}/{model}/{min_time_s}/{draw}", min_time_s)
                    rows.append({"gpu": model, "min_time_s": min_time_s, "draw": draw, **row})
            backend.close()
    table = [[r["gpu"], r["min_time_s"], r["draw"], r["region_s"], r["calls"], name, common.pct(c["time_share"], 1),
              common.pct(c["error"], 1), common.pct(c["half_width"], 1), "yes" if c["holds"] else "NO",
              "yes" if c["told_apart"] else "no"]
             for r in rows for name, c in r["classes"].items()]
    common.print_table(["GPU", "min_time_s", "draw", "region s", "calls", "class", "time", "error", "half-width",
                        "bound holds", "told apart"], table, title="Operator classes against the truth (SIMULATED)")
    held = [c["holds"] for r in rows for c in r["classes"].values()]
    print(f"bounds held the truth for {sum(held)} of {len(held)} class figures; classes' sum vs ETS: at most "
          f"{max(r['sum_error'] for r in rows):.1e} relative")
    path = common.write_result(NAME, {"regions": rows}, quick=args.quick, started=started,
                               simulated_gpus=[r["gpu"] for r in rows], out_dir=args.out)
    print(f"\nwritten: {path}")


if __name__ == "__main__":
    main()
