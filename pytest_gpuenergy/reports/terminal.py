"""The end-of-session table in the terminal."""

from __future__ import annotations

from typing import Iterable, Sequence


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Iterable[int] = ()) -> list[str]:
    """Plain aligned columns; ``right`` are the indices of right-aligned (numeric) columns."""
    right = set(right)
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def results_table(cases: Iterable) -> list[str]:
    """One row per case and GPU: ETS, T, EDP, mean power, repetitions and spread."""
    rows, simulated = [], False
    for case in cases:
        result = case.merged
        for gpu in result.per_gpu:
            summary = gpu.summary
            simulated = simulated or gpu.simulated
            share = summary.ets_bound_share
            rows.append([
                case.test_id, gpu.cap_label, f"{gpu.gpu_index}",
                f"{summary.ets_j:.4g}", "-" if share is None else f"±{100 * share:.1f}%",
                f"{summary.time_s:.4g}", f"{summary.edp_js:.4g}",
                f"{summary.mean_power_w:.4g}", f"{summary.n}",
                f"{summary.ets_cv * 100:.1f}%" if summary.n > 1 else "-",
                gpu.method + (" (sim)" if gpu.simulated else ""),
            ])
    header = ["test", "cap", "gpu", "ETS J", "bound", "T s", "EDP J s", "P W", "n", "cv", "method"]
    lines = format_table(header, rows, right=range(3, 10))
    lines.append("bound: how far the true ETS may lie from the figure (the meter's bound, widest side)")
    if simulated:
        lines.append("(sim): figures from the GPU simulator, not measured on a real GPU")
    return lines
