"""A measurement's figures per domain (``--energy-domains=gpu,cpu,dram``): the case's GPUs, the
host's CPU packages and DRAM (``host/``), and the node's total, each per call with its bound.

The host is read at the same two edges as the GPUs (``Region``); a region's host figures are
divided by its calls and averaged over the repetitions as the GPUs' are (``Summary``), so that
``per_domain["gpu"].ets_j`` is the result's ``ets_j`` and ``node`` adds up what was measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ..host.recorder import HostFigure
from .results import Domain, DomainEnergy, EnergyResult


def per_domain(result: EnergyResult, regions: Sequence[tuple[Sequence[HostFigure], int]],
               host_simulated: bool) -> dict[Domain, DomainEnergy]:
    """``result``'s GPUs and the host's ``regions`` (each region's figures and its calls) per domain."""
    summary = result.summary
    gpu = DomainEnergy(summary.ets_j, _known(summary.ets_low_j, summary.ets_j),
                       _known(summary.ets_high_j, summary.ets_j), result.simulated)
    found: dict[Domain, DomainEnergy] = {"gpu": gpu}
    for domain in [figure.domain for figure in regions[0][0]] if regions else []:
        per_call = [(next(f for f in figures if f.domain == domain), calls) for figures, calls in regions]
        found[domain] = DomainEnergy(
            statistics.fmean(f.ets_j / calls for f, calls in per_call),
            statistics.fmean(f.low_j / calls for f, calls in per_call),
            statistics.fmean(f.high_j / calls for f, calls in per_call),
            host_simulated)
    parts = list(found.values())
    found["node"] = DomainEnergy(sum(p.ets_j for p in parts), sum(p.ets_low_j for p in parts),
                                 sum(p.ets_high_j for p in parts), any(p.simulated for p in parts))
    return found


def _known(bound: float | None, estimate: float) -> float:
    return estimate if bound is None else bound


def merge_domains(results: Sequence[EnergyResult]) -> dict[Domain, DomainEnergy]:
    """The per-domain figures of one case's results (``--energy-repeat``: several calls of the test),
    weighted by their repetitions as the merged GPU figures are; empty if any result has none."""
    if not results or any(not result.per_domain for result in results):
        return {}
    weights = [result.n for result in results]
    merged: dict[Domain, DomainEnergy] = {}
    for domain in results[0].per_domain:
        parts = [result.per_domain[domain] for result in results]
        merged[domain] = DomainEnergy(
            sum(w * p.ets_j for w, p in zip(weights, parts)) / sum(weights),
            sum(w * p.ets_low_j for w, p in zip(weights, parts)) / sum(weights),
            sum(w * p.ets_high_j for w, p in zip(weights, parts)) / sum(weights),
            any(p.simulated for p in parts))
    return merged
