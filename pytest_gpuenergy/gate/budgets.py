"""Energy budgets: ``@pytest.mark.energy_budget(ets=, edp=, time=, gpu=, cap=, domain=, phase=)``.

``domain`` says whose energy the budget holds: ``"gpu"`` (the default) each GPU's, as measured by
the GPU; ``"cpu"``, ``"dram"`` or ``"node"`` the host's CPU packages, its DRAM, or the node's total
(the case's GPUs, CPU and DRAM together), which ``--energy-domains=gpu,cpu,dram`` measures
(``meter/domains.py``). A domain's T is the region's, its EDP that ETS times T.

``phase`` names a phase of the measured region (``energy_meter.phase("update")``, or ``"other"``:
the unmarked rest): the budget then holds that phase's figures per call on each GPU, its ETS as the
fit attributes it, its T (the marks' time) and their product, not the region's. A budget with a
phase and one without never compete: the region's budgets hold the region, each phase's its phase.

A test may carry several budgets; for each GPU (and each domain) the most specific one that matches applies:
GPU model and cap, then GPU model, then cap, then one with neither. Among equally specific
matches the one nearest the function (the lowest decorator) wins. The GPU matches by
case-insensitive substring of its name (``gpu="H100"`` matches "NVIDIA H100 80GB HBM3"); the cap
in watts or percent matches when it resolves to the limit the test ran at on that GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

from ..errors import BudgetError, CapSyntaxError
from ..gpu.specs import CapSpec, cap_text, parse_cap
from ..meter.results import Domain
from ..metrics import EDP, ETS, TIME
from ..runs.validation import bounded_number, shown

if TYPE_CHECKING:
    from ..gpu.device import PowerLimits
    from ..meter.results import EnergyResult, GpuResult

_FIGURES = {m.key: (m.field, m.label, m.unit) for m in (ETS, EDP, TIME)}   # checked in this order
_ALLOWED = set(_FIGURES) | {"gpu", "cap", "domain", "phase"}
BUDGET_DOMAINS: tuple[Domain, ...] = get_args(Domain)
_CAP_TOLERANCE_MW = 500
MAX_BUDGET = 1e15       # J, J s or s: far beyond any run, and small enough that every comparison stays finite


@dataclass(frozen=True)
class Budget:
    ets_j: float | None = None
    edp_js: float | None = None
    time_s: float | None = None
    gpu: str | None = None
    cap: CapSpec | None = None
    exact_gpu: bool = False         # the GPU model by its whole name (a budgets file), not a part of it
    source: str | None = None       # where it was written: a budgets file's "path:line" (None: a marker)
    domain: Domain = "gpu"          # whose energy: each GPU's, or the host's cpu/dram, or the node's total
    phase: str | None = None        # a phase of the region (energy_meter.phase): its figures, not the region's

    @property
    def specificity(self) -> int:
        return 2 * (self.gpu is not None) + (self.cap is not None)

    def matches(self, gpu_name: str, limit_mw: int, limits: PowerLimits) -> bool:
        if self.gpu is not None and (self.gpu != gpu_name if self.exact_gpu else self.gpu.lower() not in gpu_name.lower()):
            return False
        return not (self.cap is not None and abs(self.cap.resolve_mw(limits) - limit_mw) > _CAP_TOLERANCE_MW)

    def describe(self) -> str:
        parts = [f"{key}={getattr(self, attr):g}" for key, (attr, _, _) in _FIGURES.items() if getattr(self, attr) is not None]
        if self.gpu is not None:
            parts.append(f"gpu={self.gpu!r}")
        if self.cap is not None:
            parts.append(f"cap={self.cap.label}")
        if self.domain != "gpu":
            parts.append(f"domain={self.domain!r}")
        if self.phase is not None:
            parts.append(f"phase={self.phase!r}")
        return f"energy_budget({', '.join(parts)})"


def budget_from_marker(args: Sequence[Any], kwargs: Mapping[str, Any]) -> Budget:
    """Validate one marker's arguments; every problem is a BudgetError naming it and the fix."""
    if args:
        raise BudgetError(
            f"energy_budget takes keyword arguments only (ets=, edp=, time=, gpu=, cap=, domain=, phase=), got positional {shown(list(args))}"
        )
    unknown = sorted(set(kwargs) - _ALLOWED)
    if unknown:
        raise BudgetError(
            f"energy_budget got unknown argument(s) {', '.join(unknown)}; allowed: ets=, edp=, time=, gpu=, cap=, domain=, phase="
        )
    figures = {}
    for key, (attr, _label, unit) in _FIGURES.items():
        if key in kwargs and kwargs[key] is not None:
            figures[attr] = _positive_number(key, kwargs[key], unit)
    if not figures:
        raise BudgetError("energy_budget needs at least one of ets= (J), edp= (J s), time= (s)")
    gpu = kwargs.get("gpu")
    if gpu is not None and (not isinstance(gpu, str) or not gpu.strip()):
        raise BudgetError(f"energy_budget gpu= must be part of a GPU name such as 'H100', got {shown(gpu)}")
    cap = kwargs.get("cap")
    cap_spec = None
    if cap is not None:
        if isinstance(cap, bool) or not isinstance(cap, (str, int, float)):
            raise BudgetError(f"energy_budget cap= must be watts (200) or a percentage ('60%'), got {shown(cap)}")
        try:
            cap_spec = parse_cap(cap_text(cap, "energy_budget cap="), source="energy_budget cap=")
        except CapSyntaxError as exc:
            raise BudgetError(str(exc)) from None
    domain = kwargs.get("domain", "gpu")
    if domain not in BUDGET_DOMAINS:
        raise BudgetError(f"energy_budget domain= must be one of {', '.join(map(repr, BUDGET_DOMAINS))}, got {shown(domain)}")
    phase = kwargs.get("phase")
    if phase is not None and (not isinstance(phase, str) or not phase.strip()):
        raise BudgetError(f"energy_budget phase= must name a phase marked with energy_meter.phase (or 'other'), "
                          f"got {shown(phase)}")
    if phase is not None and domain != "gpu":
        raise BudgetError(f"energy_budget phase={phase!r} holds a phase of the GPUs' energy; drop domain={domain!r} "
                          f"(phases are attributed from the GPU's counter only)")
    return Budget(ets_j=figures.get("ets_j"), edp_js=figures.get("edp_js"), time_s=figures.get("time_s"),
                  gpu=gpu.strip() if gpu else None, cap=cap_spec, domain=domain,
                  phase=phase.strip() if phase is not None else None)


def _positive_number(key: str, value: Any, unit: str) -> float:
    number = bounded_number(value, low=0.0, high=MAX_BUDGET, low_open=True)   # 10**400 is out of range, not an overflow
    if number is None:
        raise BudgetError(f"energy_budget {key}= must be a positive number of {unit}, got {shown(value)} (at most {MAX_BUDGET:g} {unit})")
    return number


def select_budget(budgets: Iterable[Budget], gpu_name: str, limit_mw: int, limits: PowerLimits,
                  domain: Domain = "gpu", phase: str | None = None) -> Budget | None:
    """The most specific matching budget of ``domain`` and ``phase`` (None: the region's); the first
    listed wins among equals."""
    best: Budget | None = None
    for budget in budgets:
        if budget.domain != domain or budget.phase != phase:
            continue
        if budget.matches(gpu_name, limit_mw, limits) and (best is None or budget.specificity > best.specificity):
            best = budget
    return best


@dataclass(frozen=True)
class BudgetMiss:
    figure: str         # "ETS", "EDP", "T"
    measured: float
    budget: float
    unit: str

    @property
    def excess_pct(self) -> float:
        return (self.measured / self.budget - 1.0) * 100.0

    def describe(self) -> str:
        return f"{self.figure} {self.measured:.4g} {self.unit} > budget {self.budget:.4g} {self.unit} (+{self.excess_pct:.1f} %)"


def check_budget(budget: Budget, figures: Any) -> list[BudgetMiss]:
    """Compare ``figures`` (anything with ets_j, edp_js, time_s) with the budget."""
    misses = []
    for attr, name, unit in _FIGURES.values():
        limit = getattr(budget, attr)
        measured = getattr(figures, attr)
        if limit is not None and measured > limit:
            misses.append(BudgetMiss(name, measured, limit, unit))
    return misses


@dataclass(frozen=True)
class DomainFigures:
    """A domain's or a phase's figures as a budget reads them: its ETS per call, its T (a domain's: the
    region's), and their EDP."""

    ets_j: float
    time_s: float
    low_j: float
    high_j: float

    @property
    def edp_js(self) -> float:
        return self.ets_j * self.time_s


def domain_failures(budgets: Sequence[Budget], result: EnergyResult, limits: PowerLimits, where: str) -> list[str]:
    """One line per host or node domain whose budget ``result`` misses (``where``: the case, its cap).

    The budgets match by the case's first GPU (its model and the limit it ran at), as a GPU's do.
    """
    first = result.per_gpu[0]
    ran_at_mw = int(round(1000 * (first.limit_requested_w if first.limit_requested_w is not None else first.limit_enforced_w)))
    lines = []
    for domain in BUDGET_DOMAINS[1:]:
        budget = select_budget(budgets, first.gpu_name, ran_at_mw, limits, domain)
        if budget is None:
            continue
        figure = result.per_domain.get(domain)
        if figure is None:
            lines.append(f"{budget.describe()}: the {domain} energy was not measured; run with "
                         f"--energy-domains=gpu,cpu,dram (or drop domain={domain!r})")
            continue
        figures = DomainFigures(figure.ets_j, result.time_s, figure.ets_low_j, figure.ets_high_j)
        misses = check_budget(budget, figures)
        if misses:
            origin = "simulated" if figure.simulated else "measured"
            lines.append(f"energy budget exceeded{where}: {domain} {'; '.join(m.describe() for m in misses)} "
                         f"(true {domain} ETS within {figures.low_j:.4g}-{figures.high_j:.4g} J; {origin}, n={result.n})")
    return lines


def gpu_budget_line(gpu: GpuResult, budgets: Sequence[Budget], limits: PowerLimits, where: str) -> str | None:
    """The line saying how ``gpu``'s region misses its most specific budget (``where``: the region, if
    several), or None where it has none or meets it."""
    ran_at_mw = int(round(1000 * (gpu.limit_requested_w if gpu.limit_requested_w is not None else gpu.limit_enforced_w)))
    budget = select_budget(budgets, gpu.gpu_name, ran_at_mw, limits)
    misses = check_budget(budget, gpu.summary) if budget is not None else []
    if budget is None or not misses:
        return None
    summary = gpu.summary
    bound = ""
    if summary.ets_low_j is not None and summary.ets_high_j is not None and any(m.figure == "ETS" for m in misses):
        bound = f" (true ETS within {summary.ets_low_j:.4g}-{summary.ets_high_j:.4g} J)"
    origin = "simulated" if gpu.simulated else "measured"
    source = f"; budget from {budget.source}" if budget.source else ""
    return (f"energy budget exceeded{where}: {'; '.join(m.describe() for m in misses)}{bound} on GPU {gpu.gpu_index} "
            f"{gpu.gpu_name} at cap {gpu.cap} (enforced {gpu.limit_enforced_w:g} W, {origin}, n={len(gpu.repetitions)}{source})")


def phase_failures(budgets: Sequence[Budget], gpu: GpuResult, limits: PowerLimits, where: str) -> list[str]:
    """One line per phase budget (``energy_budget(phase=...)``) that ``gpu``'s region misses, or that names
    a phase the region does not have (``where``: the region, if several). The most specific budget of each
    phase applies, matched by the GPU and the limit it ran at as a region's budget is."""
    ran_at_mw = int(round(1000 * (gpu.limit_requested_w if gpu.limit_requested_w is not None else gpu.limit_enforced_w)))
    lines = []
    for phase in dict.fromkeys(b.phase for b in budgets if b.phase is not None):
        budget = select_budget(budgets, gpu.gpu_name, ran_at_mw, limits, phase=phase)
        if budget is None:
            continue
        found = gpu.phases
        if not found or phase not in found:
            has = (f"its phases are {', '.join(found)}" if found else
                   "it has no phase marks (with energy_meter.phase(...): inside the measured region)")
            lines.append(f"{budget.describe()}{where}: the region on GPU {gpu.gpu_index} has no phase {phase!r}; {has}")
            continue
        figure = found[phase]
        misses = check_budget(budget, DomainFigures(figure.ets_j, figure.time_s, figure.ets_low_j, figure.ets_high_j))
        if not misses:
            continue
        told = "" if figure.distinguishable else f"; the fit could not tell it from the others: {figure.why_not}"
        lines.append(f"energy budget exceeded{where}: phase {phase!r} {'; '.join(m.describe() for m in misses)} "
                     f"(true {phase} ETS within {figure.ets_low_j:.4g}-{figure.ets_high_j:.4g} J{told}) on GPU "
                     f"{gpu.gpu_index} {gpu.gpu_name} at cap {gpu.cap} (enforced {gpu.limit_enforced_w:g} W, "
                     f"{'simulated' if gpu.simulated else 'measured'}, n={len(gpu.repetitions)})")
    return lines
