"""One table across processors and GPU models: per workload, each device at its default and at its best.

Tang et al. ("The Impact of GPU DVFS on the Energy and Performance of Deep Learning", seed 004)
set an Intel CPU, NVIDIA and AMD GPUs side by side on the same deep learning work: per workload,
each device's energy, time and energy-delay product at its default setting and at its most
efficient one, the saving between the two, and which device does the work for the least energy.
``gpuenergy table RUN.json RUN.json ...`` builds that table from saved runs (``cli/table.py``).

How the figures are chosen, in one place (``build_table``):

- A *device* is a GPU model as its cases name it (``gpu_name``), with its backend and whether it is
  simulated: runs of several models in one document (a mixed machine) are split by model, and one
  model per document is the same thing. A case measured on several GPUs of one model counts as
  one device: its GPUs' energy per repetition added, its time the longest of them.
- A *workload* is a test without its cap (``sweep.workload_key``): the same test on every device.
- The *default* setting is the point at the GPU's default limit (``default``, ``100%`` or an
  uncapped run at the default limit); where no case ran there, the highest cap measured, marked.
  The *best* setting is the cap with the least mean ETS per call, as the run reports' energy-optimal
  cap (``Sweep.optimum``: suspect points never chosen, ties to the higher limit). Saving is
  ``100 x (1 - ETS at best / ETS at default)``.
- The *most efficient* device of a workload has the least ETS at its best setting, among devices
  of the same origin: simulated figures are never ranked against measured ones. Whether the
  runner-up's ETS is higher beyond the repetitions' noise (the gate's test, at its confidence) is said.
- Runs saved with ``--energy-domains`` also give, under each device, the host's CPU and DRAM at the
  GPU's two settings and the node's total at the default and at the cap where it is least; the
  device whose node total is least is named apart from the most efficient GPU (``DomainRow``).
- Two runs of one device cannot both be shown: which is right is not for the table to guess, so
  it is an error naming both files. Only cases whose test passed are used (as baselines are);
  cases under an SM clock cap are left out with a note (the table compares power caps).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from html import escape

from ..errors import SettingError, StorageError
from ..gate.decide import decide
from ..gate.records import THRESHOLD_ONLY
from ..gate.settings import DEFAULT_CONFIDENCE
from ..gate.verdicts import REGRESSION
from ..meter.results import Repetition
from ..runs.records import CaseEntry, RunDocument, model_text
from .digest import SIM_FOOTNOTE, SIM_MARK
from .markdown import _text as markdown_text
from .markdown import table as markdown_table
from .numbers import cap_sort_key, column_cells, elide, short_names, si
from .sweep import Sweep, SweepPoint, gpu_range, workload_key
from .terminal import Column, fit_table, wrap

MIXED_WARNING = ("MIXED: this table holds simulated AND measured devices. Simulated figures are not "
                 "measurements; the two are never ranked against each other")
SIM_WARNING = "SIMULATED: every figure in this table comes from the GPU simulator, not from a real GPU"
WINNER_MARK = "*"
DOMAIN_MARK = "↳"      # a host domain's row, under the device whose run measured it


@dataclass(frozen=True)
class Device:
    """One processor the table sets beside the others: a GPU model of one backend, from one run."""

    name: str              # the GPU's name as its cases give it (``NVIDIA H100 80GB HBM3 (simulated)``)
    vendor: str            # ``NVIDIA``, ``AMD``, or ``-`` when the name does not say
    backend: str
    simulated: bool
    source: str            # the run document it came from
    gpus: int = 1          # GPUs of this model in a case (one for most tests)

    @property
    def label(self) -> str:
        """The model as tables show it: ``H100 80GB HBM3 (sim)``, ``2x H100 ...`` for a case on two."""
        count = f"{self.gpus}x " if self.gpus > 1 else ""
        return f"{count}{model_text(self.name)}{SIM_MARK if self.simulated else ''}"


@dataclass(frozen=True)
class Setting:
    """A device's figures at one power cap: means per call over the repetitions."""

    cap: str
    limit_w: float
    ets_j: float
    time_s: float
    edp_js: float
    n: int
    ets_samples_j: tuple[float, ...] = field(default=(), compare=False, repr=False)   # per repetition

    @classmethod
    def of(cls, point: SweepPoint) -> Setting:
        return cls(point.cap, point.limit_enforced_w, point.ets_j, point.time_s, point.edp_js, point.n,
                   point.samples["ets"])

    @property
    def cap_text(self) -> str:
        """``60% (420 W)``, ``200 W``."""
        watts = f"{self.limit_w:g} W"
        return watts if self.cap.replace(" ", "") == watts.replace(" ", "") else f"{self.cap} ({watts})"


@dataclass(frozen=True)
class DeviceRow:
    """One workload on one device: at its default setting, at its best, and what the best saves."""

    workload: str
    device: Device
    default: Setting
    default_measured: bool     # False: no case ran at the default limit; ``default`` is the highest cap measured
    best: Setting
    saving_pct: float          # 100 x (1 - best ETS / default ETS): positive means less energy
    domains: tuple[DomainRow, ...] = ()   # the host's CPU and DRAM and the node's total, where the run measured them


@dataclass(frozen=True)
class DomainRow:
    """The host's CPU or DRAM, or the node's total, while one device ran a workload (``--energy-domains``):
    at the GPU's default and best settings, and for the node at the cap where its total is least. A cap
    that saves GPU energy makes the work last longer and the host draws power all that time, so the
    node's saving is smaller than the GPU's, and its best cap may be a higher one."""

    domain: str                # cpu, dram, node
    default_ets_j: float       # per call, at the GPU's default setting
    best_ets_j: float          # per call, at the GPU's best setting; for the node, at the node's own best
    simulated: bool
    best_cap: str | None = None   # the node's: the cap where the node's total is least (may differ from the GPU's)

    @property
    def label(self) -> str:
        name = {"cpu": "host CPU", "dram": "host DRAM", "node": "node total"}.get(self.domain, self.domain)
        return name + (SIM_MARK if self.simulated else "")

    @property
    def saving_pct(self) -> float:
        """What the GPU's best setting saves (negative: costs) in this domain, in %."""
        return 100.0 * (1.0 - self.best_ets_j / self.default_ets_j) if self.default_ets_j > 0 else math.nan


@dataclass(frozen=True)
class Winner:
    """A workload's most efficient device among those of one origin, and how sure that is."""

    workload: str
    row: DeviceRow
    runner_up: DeviceRow | None
    ahead_pct: float | None       # how much less ETS the winner needs than the runner-up, both at best, in %
    beyond_noise: bool | None     # None: too few repetitions to test

    def describe(self) -> str:
        text = f"{self.row.device.label} at {self.row.best.cap_text}"
        if self.runner_up is None or self.ahead_pct is None:
            return text
        text += f", {self.ahead_pct:.1f} % less ETS than {self.runner_up.device.label}"
        if self.beyond_noise is None:
            return text + " (not tested: fewer than 2 repetitions)"
        return text + (" (beyond the noise)" if self.beyond_noise else " (within the noise: the repetitions cannot tell them apart)")


@dataclass(frozen=True)
class DeviceTable:
    """The whole table: rows by workload (in first-seen order) and device, the winners, and notes."""

    rows: tuple[DeviceRow, ...]
    devices: tuple[Device, ...]
    winners: tuple[Winner, ...]
    notes: tuple[str, ...] = ()
    node_leads: tuple[tuple[str, str], ...] = ()   # (workload, which device's node total is least, in words)

    @property
    def simulated(self) -> bool:
        return True in self._origins()

    @property
    def mixed(self) -> bool:
        """Simulated and measured figures in one table (devices, or a host's domains): said loudly
        wherever the table appears."""
        return self._origins() == {True, False}

    def _origins(self) -> set[bool]:
        return {d.simulated for d in self.devices} | {dom.simulated for r in self.rows for dom in r.domains}

    @property
    def workloads(self) -> list[str]:
        return list(dict.fromkeys(row.workload for row in self.rows))

    def rows_of(self, workload: str) -> list[DeviceRow]:
        return [row for row in self.rows if row.workload == workload]

    def is_winner(self, row: DeviceRow) -> bool:
        """Whether ``row``'s device is the most efficient for its workload (among its origin)."""
        return any(w.row is row for w in self.winners)

    def names(self) -> dict[str, str]:
        """Each workload's shortest unique name (``test_train``)."""
        return short_names(self.workloads)

    def title(self) -> str:
        models = len(self.devices)
        text = (f"energy across devices: {len(self.workloads)} workload{'s' if len(self.workloads) != 1 else ''} "
                f"on {models} GPU model{'s' if models != 1 else ''}")
        return text + (" (simulated and measured: MIXED)" if self.mixed else " (simulated)" if self.simulated else "")

    def footnotes(self, mark: str = WINNER_MARK) -> list[str]:
        """What every rendering says under the table, in words (``mark``: how it marks the most efficient)."""
        lines = ["default: the GPU's default power limit (a cap of default or 100 %, or an uncapped run at "
                 "that limit); best: the cap with the least mean ETS per call; saving: ETS saved at best "
                 "against default. ETS, T and EDP are means per call of the measured function"]
        if not all(row.default_measured for row in self.rows):
            lines.append("†: the default limit was not measured; the figures are at the highest cap measured")
        if self.winners:
            rank = "among measured devices, and apart among simulated ones" if self.mixed else "of the devices here"
            lines.append(f"{mark}: the most efficient device for the workload, {rank}: the least ETS at its best setting")
        if any(row.domains for row in self.rows):
            lines.append(f"{DOMAIN_MARK} host CPU, host DRAM: the host's energy over the same regions (Linux powercap, "
                         f"RAPL; the whole host's), at the GPU's default and best caps; node total: GPU, CPU and DRAM "
                         f"together, at the default and at the cap where it is least. T and EDP are the GPU's")
        if self.simulated:
            lines.append(SIM_FOOTNOTE)
        return lines

    def leads_of(self, workload: str) -> list[str]:
        """What the table says under a workload: its most efficient devices, and the least node total."""
        said = [f"most efficient{' (simulated)' if w.row.device.simulated else ''}: {w.describe()}"
                for w in self.winners if w.workload == workload]
        return said + [text for name, text in self.node_leads if name == workload]


# -- building the table ---------------------------------------------------------------------------

def build_table(docs: Sequence[RunDocument], confidence: float = DEFAULT_CONFIDENCE) -> DeviceTable:
    """The table of ``docs`` (each a run document; see the module docstring for every choice).

    Raises ``StorageError`` for a run without results and ``SettingError`` for a run given twice
    or two runs of one device, each naming the files and the fix.
    """
    if not docs:
        raise SettingError("no run given; name at least one run document (pytest --energy-save writes them)")
    owners: dict[tuple[str, str, bool], RunDocument] = {}
    entries: dict[tuple[str, str, bool], list[CaseEntry]] = {}
    seen: dict[str, RunDocument] = {}
    clocked = 0
    for doc in docs:
        where = _where(doc)
        if doc.run_id in seen:
            raise SettingError(f"{where}: run {doc.run_id} is given twice (also as {_where(seen[doc.run_id])}); "
                               f"name each run once")
        seen[doc.run_id] = doc
        if not doc.cases:
            raise StorageError(f"{where}: run {doc.run_id} has no results (no measured case); name a run saved "
                               f"by pytest --energy-save after tests that measured energy")
        passed = doc.passed_only().cases
        if not passed:
            raise StorageError(f"{where}: run {doc.run_id} has no passed case (its {len(doc.cases)} cases failed "
                               f"or were skipped), so no figure to show; name a run whose tests passed")
        for entry in passed:
            if entry.clock_cap is not None:
                clocked += 1
                continue
            key: tuple[str, str, bool] = (entry.gpu_name, entry.backend, entry.simulated)
            owner = owners.setdefault(key, doc)
            if owner is not doc:
                raise SettingError(
                    f"{_where(owner)} and {where} both hold runs of {model_text(entry.gpu_name)} ({entry.backend}): "
                    f"the table shows one run per GPU model and will not guess which is right; name one of them "
                    f"(the newer is {_where(max(owner, doc, key=lambda d: d.created_at))})")
            entries.setdefault(key, []).append(entry)
    rows: list[DeviceRow] = []
    devices: list[Device] = []
    for device_key, found in entries.items():
        device_rows, device = _device_rows(owners[device_key], found, confidence)
        rows += device_rows
        devices.append(device)
    notes = _coverage_notes(rows, devices)
    if clocked:
        notes.append(f"{clocked} case{'s' if clocked != 1 else ''} under an SM clock cap left out: the table "
                     f"compares power caps (gpuenergy tune --knob clock compares clock caps)")
    order = {w: i for i, w in enumerate(dict.fromkeys(r.workload for r in rows))}
    rows.sort(key=lambda r: order[r.workload])
    return DeviceTable(tuple(rows), tuple(devices), tuple(_winners(rows, confidence)), tuple(notes),
                       tuple(_node_leads(rows)))


def _where(doc: RunDocument) -> str:
    return str(doc.path) if doc.path is not None else f"run {doc.run_id}"


def _device_rows(doc: RunDocument, entries: Sequence[CaseEntry], confidence: float) -> tuple[list[DeviceRow], Device]:
    """One device's workloads, each swept over its caps as the run reports sweep them."""
    first = entries[0]
    by_case: dict[tuple[str, str], list[CaseEntry]] = {}
    for entry in entries:
        by_case.setdefault((entry.case_id, entry.cap), []).append(entry)
    by_workload: dict[str, list[CaseEntry]] = {}
    for (case_id, cap), slots in by_case.items():
        by_workload.setdefault(workload_key(case_id, cap), []).append(_one_device(slots))
    combined = {(e.case_id, e.cap): e for cases in by_workload.values() for e in cases}
    gpus = max(len(slots) for slots in by_case.values())
    device = Device(first.gpu_name, vendor_of(first.gpu_name, first.backend, doc), first.backend, first.simulated,
                    _where(doc), gpus)
    rows = []
    for workload, cases in by_workload.items():
        points = tuple(sorted((SweepPoint.of(e) for e in cases), key=lambda p: cap_sort_key(p.cap, p.limit_enforced_w)))
        sweep = Sweep(workload, first.gpu_name, first.gpu_index, first.backend, first.simulated, points,
                      gpu_range(doc, first.gpu_index), confidence)
        found = sweep.optimum("ets")
        if found is None:          # every ETS read 0: nothing to choose from (the reader refuses that already)
            continue
        rows.append(DeviceRow(workload, device, Setting.of(found.reference), found.reference_is_default,
                              Setting.of(found.point), found.saving_pct,
                              _domains([combined[p.case_id, p.cap] for p in points],
                                       combined[found.reference.case_id, found.reference.cap],
                                       combined[found.point.case_id, found.point.cap])))
    return rows, device


def _domains(sweep: Sequence[CaseEntry], default: CaseEntry, best: CaseEntry) -> tuple[DomainRow, ...]:
    """The host's domains at the GPU's default and best settings, and the node's total at the default
    and at the cap where the node's total is least (``sweep``: the workload's cases by limit), where
    the cases carry them (a run saved without ``--energy-domains``, or before it, has none)."""
    found = []
    for domain in ("cpu", "dram"):
        at_default, at_best = default.per_domain.get(domain), best.per_domain.get(domain)
        if at_default is not None and at_best is not None:
            found.append(DomainRow(domain, at_default.ets_j, at_best.ets_j, at_default.simulated or at_best.simulated))
    nodes = [(entry, entry.per_domain.get("node")) for entry in sweep]
    at_default = default.per_domain.get("node")
    if at_default is not None and all(node is not None for _, node in nodes):
        least_j = min(node.ets_j for _, node in nodes if node is not None)
        entry, node = [(e, n) for e, n in nodes if n is not None and n.ets_j == least_j][-1]   # ties: the higher limit
        found.append(DomainRow("node", at_default.ets_j, node.ets_j, at_default.simulated or node.simulated, entry.cap))
    return tuple(found)


def _one_device(slots: Sequence[CaseEntry]) -> CaseEntry:
    """A case's entries on several GPUs of one model as one: energy added per repetition, the longest time."""
    if len(slots) == 1:
        return slots[0]
    ordered = sorted(slots, key=lambda e: e.gpu_slot)
    count = min(len(e.repetitions) for e in ordered)
    reps = []
    for i in range(count):
        parts = [e.repetitions[i] for e in ordered]
        ets = math.fsum(p.ets_j for p in parts)
        time_s = max(p.time_s for p in parts)
        reps.append(Repetition(ets_j=ets, time_s=time_s, mean_power_w=ets / time_s if time_s > 0 else math.nan,
                               peak_power_w=math.fsum(p.peak_power_w for p in parts), calls=parts[0].calls))
    return replace(ordered[0], repetitions=tuple(reps))


def vendor_of(gpu_name: str, backend: str, doc: RunDocument) -> str:
    """The GPU's vendor: as the run's machine says where it does, else from the library or the name."""
    for gpu in doc.machine.get("gpus") or []:
        if isinstance(gpu, dict) and gpu.get("name") == gpu_name and isinstance(gpu.get("vendor"), str):
            return str(gpu["vendor"]).upper() if gpu["vendor"].lower() in ("amd", "nvidia") else str(gpu["vendor"])
    library = {"nvml": "NVIDIA", "amdsmi": "AMD"}.get(backend)
    if library:
        return library
    lowered = gpu_name.lower()
    if any(word in lowered for word in ("nvidia", "tesla", "geforce", "quadro")):
        return "NVIDIA"
    if any(word in lowered for word in ("amd", "instinct", "radeon")):
        return "AMD"
    return "-"


def _coverage_notes(rows: Sequence[DeviceRow], devices: Sequence[Device]) -> list[str]:
    """Workloads that only some devices ran: the reader must not take a missing row for a loss."""
    notes = []
    names = short_names(dict.fromkeys(r.workload for r in rows))
    for workload, name in names.items():
        ran = {r.device for r in rows if r.workload == workload}
        if len(devices) > 1 and len(ran) < len(devices):
            missing = ", ".join(d.label for d in devices if d not in ran)
            notes.append(f"{name}: not in the run of {missing}")
    return notes


def _winners(rows: Sequence[DeviceRow], confidence: float) -> list[Winner]:
    """Per workload and origin (measured, simulated), the device with the least ETS at its best."""
    found = []
    for workload in dict.fromkeys(r.workload for r in rows):
        for simulated in (False, True):
            group = sorted((r for r in rows if r.workload == workload and r.device.simulated == simulated),
                           key=lambda r: (r.best.ets_j, r.device.label))
            if len(group) < 2:
                continue
            winner, runner_up = group[0], group[1]
            found.append(Winner(workload, winner, runner_up, 100.0 * (1.0 - winner.best.ets_j / runner_up.best.ets_j),
                                _beyond_noise(winner, runner_up, confidence)))
    return found


def _node_leads(rows: Sequence[DeviceRow]) -> list[tuple[str, str]]:
    """Per workload and origin where every device has the node's total: the least of them, each at the
    cap where its own total is least. The host's figures are means without their repetitions, so the
    lead is not tested against the noise, and the words say so."""
    found = []
    for workload in dict.fromkeys(r.workload for r in rows):
        for simulated in (False, True):
            group = [r for r in rows if r.workload == workload and r.device.simulated == simulated]
            nodes = [(next((d for d in r.domains if d.domain == "node"), None), r) for r in group]
            if len(nodes) < 2 or any(node is None for node, _ in nodes):
                continue
            ranked = sorted(((node, r) for node, r in nodes if node is not None), key=lambda p: (p[0].best_ets_j, p[1].device.label))
            (least, row), (next_node, next_row) = ranked[0], ranked[1]
            lead = 100.0 * (1.0 - least.best_ets_j / next_node.best_ets_j)
            found.append((workload, f"least node total (GPU, CPU and DRAM{', simulated' if simulated else ''}): "
                                    f"{row.device.label} at {least.best_cap}, {lead:.1f} % less than "
                                    f"{next_row.device.label} (not tested against the noise: the host's figures are means)"))
    return found


def _beyond_noise(winner: DeviceRow, runner_up: DeviceRow, confidence: float) -> bool | None:
    """Whether the runner-up's ETS at its best is higher than the winner's beyond the repetitions' noise
    (the gate's one-sided test at its confidence); None with fewer than 2 repetitions on a side."""
    change = decide("ets", winner.best.ets_samples_j, runner_up.best.ets_samples_j, 0.0, confidence)
    if change.method == THRESHOLD_ONLY:
        return None
    return change.verdict == REGRESSION


# -- rendering: terminal, Markdown, HTML --------------------------------------------------------------

_METRICS = (("ETS", "J", "ets_j"), ("T", "s", "time_s"), ("EDP", "J s", "edp_js"))
_NOT_DEFAULT = "†"


def _document_rows(table: DeviceTable, workload: str) -> list[tuple[DeviceRow, bool, list[str]]]:
    """A workload's rows for Markdown and HTML: (its device's row, whether this is a host domain's row,
    the cells: device, vendor, default cap, ETS, T, EDP, best cap, ETS, T, EDP, saving, most efficient)."""
    out = []
    for r in table.rows_of(workload):
        default_cap = _default_cap(r) + f" ({r.default.limit_w:g} W)"
        out.append((r, False, [r.device.label, r.device.vendor, default_cap,
                               *(si(getattr(r.default, name), unit) for _, unit, name in _METRICS), r.best.cap_text,
                               *(si(getattr(r.best, name), unit) for _, unit, name in _METRICS), _saving(r),
                               "most efficient" if table.is_winner(r) else ""]))
        for domain in r.domains:
            out.append((r, True, [f"{DOMAIN_MARK} {domain.label}", "", default_cap, si(domain.default_ets_j, "J"), "-", "-",
                                  domain.best_cap or r.best.cap_text, si(domain.best_ets_j, "J"), "-", "-",
                                  _percent(domain.saving_pct), ""]))
    return out


def _default_cap(row: DeviceRow) -> str:
    return row.default.cap + ("" if row.default_measured else _NOT_DEFAULT)


def _saving(row: DeviceRow) -> str:
    return _percent(row.saving_pct)


def _percent(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.1f}%"


def table_lines(table: DeviceTable, width: int) -> list[str]:
    """The table for a terminal ``width`` columns wide: a block per workload with two lines per device
    (its default setting, then its best with the saving), then the notes."""
    lines = wrap(table.title(), width)
    if table.mixed:
        lines += wrap(MIXED_WARNING, width)
    elif table.simulated:
        lines += wrap(SIM_WARNING, width)
    names = table.names()
    for workload in table.workloads:
        rows = table.rows_of(workload)
        texts: list[list[str]] = []            # device, vendor, setting; then the saving
        figures: list[list[float | None]] = []  # ETS, T, EDP: one SI prefix per column, chosen below
        for r in rows:
            mark = WINNER_MARK if table.is_winner(r) else " "
            texts += [[f"{mark} {r.device.label}", r.device.vendor, _setting_text(r), ""],
                      ["", "", f"best {r.best.cap}", _saving(r)]]
            figures += [[getattr(r.default, name) for _, _, name in _METRICS],
                        [getattr(r.best, name) for _, _, name in _METRICS]]
            for domain in r.domains:
                best = "best" if domain.best_cap is None else f"best {domain.best_cap}"
                texts += [[f"  {DOMAIN_MARK} {domain.label}", "", "default", ""],
                          ["", "", best, _percent(domain.saving_pct)]]
                figures += [[domain.default_ets_j, None, None], [domain.best_ets_j, None, None]]
        headers = []
        scaled = []
        for column, (title, unit, _) in enumerate(_METRICS):
            unit_text, shared = column_cells([f[column] for f in figures], unit)
            headers.append(f"{title} {unit_text}".strip())
            scaled.append(shared)
        cells = [t[:3] + [scaled[0][i], scaled[1][i], scaled[2][i]] + t[3:] for i, t in enumerate(texts)]
        columns = (Column("  device", elide=True), Column("vendor", drop=1), Column("setting"),
                   *(Column(h, right=True) for h in headers), Column("saving", right=True))
        lines += [""] + [elide(f"workload {names[workload]}", width, keep_start=True)] + fit_table(columns, cells, width)
        for lead in table.leads_of(workload):
            lines += wrap(lead, width, "  ")
    lines.append("")
    for note in table.notes:
        lines += wrap(f"note: {note}", width)
    for line in table.footnotes():
        lines += wrap(line, width)
    lines += wrap("runs: " + "; ".join(f"{d.label} from {d.source}" for d in table.devices), width)
    return lines


def _setting_text(row: DeviceRow) -> str:
    return f"default {row.default.cap}" if row.default_measured else f"highest {row.default.cap}{_NOT_DEFAULT}"


def table_markdown(table: DeviceTable) -> str:
    """The table as Markdown (a CI job summary): one table of every workload and device, then notes."""
    lines = [f"## {table.title()[0].upper()}{table.title()[1:]}", ""]
    if table.mixed:
        lines += [f"> **{MIXED_WARNING}.**", ""]
    elif table.simulated:
        lines += [f"> **{SIM_WARNING}.**", ""]
    names = table.names()
    header = ["workload", "device", "vendor", "default"] + ["ETS", "T", "EDP"] + ["best"] + ["ETS", "T", "EDP"] + \
        ["saving", "most efficient"]
    body = [[names[workload], *cells] for workload in table.workloads for _, _, cells in _document_rows(table, workload)]
    lines += markdown_table(header, body, code_columns=(0,), right=[4, 5, 6, 8, 9, 10, 11])
    lines.append("")
    lines += [f"- `{names[workload]}`: {markdown_text(lead)}" for workload in table.workloads for lead in table.leads_of(workload)]
    lines += [f"- Note: {markdown_text(n)}" for n in table.notes]
    lines += ["", *(f"<sub>{markdown_text(f)}</sub><br>" for f in table.footnotes("most efficient"))]
    lines += [f"<sub>Runs: {markdown_text('; '.join(f'{d.label} from {d.source}' for d in table.devices))}</sub>"]
    return "\n".join(lines).rstrip() + "\n"


_NUMERIC = (3, 4, 5, 7, 8, 9, 10)      # the figure and saving cells of a document row

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;padding:16px 20px;max-width:1600px;
color:#1d1d1f;background:#fff;line-height:1.4;overflow-wrap:anywhere}
h1{font-size:1.45em;margin:0 0 .3em}
.sim{background:#fff4d6;border:1px solid #b7791f;padding:6px 10px;border-radius:6px;font-weight:600}
.mixed{background:#fde2e1;border:2px solid #b3261e;padding:8px 12px;border-radius:6px;font-weight:700}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.86em;margin:.4em 0}th,td{border:1px solid #d0d0d0;padding:3px 7px;vertical-align:top}
th{background:#f4f4f4;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.winner td{background:#e3f6e5}tr td.workload{background:#fff}tr.domain td{color:#4a4a4a;font-size:.95em}tr.sim-device td.device{font-style:italic}
td.workload{font-weight:600}
.note{color:#4a4a4a;font-size:.9em}code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.95em}
"""


def table_html(table: DeviceTable) -> str:
    """A self-contained page (inline CSS, no script): the table, the winners, the notes."""
    title = table.title()[0].upper() + table.title()[1:]
    body = [f"<h1>{escape(title)}</h1>"]
    if table.mixed:
        body.append(f'<p class="mixed">{escape(MIXED_WARNING)}.</p>')
    elif table.simulated:
        body.append(f'<p class="sim">{escape(SIM_WARNING)}.</p>')
    names = table.names()
    head = ("<tr><th rowspan=2>workload</th><th rowspan=2>device</th><th rowspan=2>vendor</th>"
            "<th colspan=4>default</th><th colspan=4>best (least ETS)</th><th rowspan=2>saving</th>"
            "<th rowspan=2>most efficient</th></tr><tr>" + "<th>cap</th><th>ETS</th><th>T</th><th>EDP</th>" * 2 + "</tr>")
    body_rows = []
    for workload in table.workloads:
        rows = _document_rows(table, workload)
        for i, (row, host, cells) in enumerate(rows):
            classes = " ".join(c for c in ("domain" if host else "winner" if table.is_winner(row) else "",
                                           "sim-device" if row.device.simulated else "") if c)
            lead = (f'<td class="workload" rowspan={len(rows)}><code>{escape(names[workload])}</code></td>'
                    if i == 0 else "")
            tds = "".join(f'<td class="{"device" if j == 0 else "num" if j in _NUMERIC else ""}">{escape(c)}</td>'
                          for j, c in enumerate(cells))
            body_rows.append(f'<tr class="{classes}">{lead}{tds}</tr>')
    body.append(f'<div class="scroll"><table><thead>{head}</thead><tbody>{"".join(body_rows)}</tbody></table></div>')
    items = [f"<code>{escape(names[workload])}</code>: {escape(lead)}" for workload in table.workloads
             for lead in table.leads_of(workload)]
    items += [f"Note: {escape(n)}" for n in table.notes]
    if items:
        body.append("<ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>")
    body += [f'<p class="note">{escape(line)}</p>' for line in table.footnotes("most efficient")]
    body.append('<p class="note">Runs: ' + escape("; ".join(f"{d.label} from {d.source}" for d in table.devices)) + "</p>")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")
