"""One test session's GPU side, in plain Python: the pytest glue (``hooks.py``) only calls this.

It opens the backend, picks the GPUs, repairs limits a dead run left changed, hands out cappers
and meters, collects every result with its test's outcome, checks budgets, and at the end makes
sure no GPU is left at a changed limit. The pytest glue makes one only when the GPUs are needed
(``state.PluginState.start``): a session whose tests use none of the plugin touches no GPU and no
state file.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import realtime
from ..errors import DeviceError, GpuEnergyError, LimitRestoreError, MeasurementError
from ..gate.budgets import Budget, domain_failures, gpu_budget_line, phase_failures
from ..gpu.capping import PowerCap, PowerCapper, power_journal_for
from ..gpu.claims import Claim, claim_gpus, in_order
from ..gpu.clocks import ClockCap, ClockCapper, ClockLock, clock_journal_for
from ..gpu.device import Backend, Gpu, PowerLimits, open_backend, retry_transient
from ..gpu.journal import Journal, journals_for
from ..gpu.locks import holding, lock_paths
from ..gpu.placement import Placement, pin_current_device, pin_worker
from ..host.recorder import HostRecorder, open_host
from ..meter import CapContext, EnergyMeter
from ..meter.distributed import current_group
from ..meter.domains import merge_domains
from ..meter.region import PendingResult, current_limits
from ..meter.results import EnergyResult, GpuResult
from ..runs import PASSED, Outcome
from ..runs.ids import node_id_of, split_region
from ..runs.records import CaseEntry
from .markers import NOTHING_MEASURED
from .options import SessionOptions


@dataclass
class CaseRecord:
    """All repetitions measured for one case: one region of one test (``test_id``), and how the
    test ended (``outcome``, one of ``runs.OUTCOMES``): baselines, budgets and the gate use passed
    cases only. Each repetition's figure may still be pending (``meter.region.PendingResult``)."""

    test_id: str
    results: list[PendingResult] = field(default_factory=list)
    outcome: Outcome = PASSED
    _merged: tuple[tuple[PendingResult, ...], EnergyResult] | None = field(default=None, repr=False, compare=False)

    @property
    def merged(self) -> EnergyResult:
        """The results of repeated calls as one result whose repetitions are all of theirs (waiting
        for any figure not worked out yet); kept until the results change (the end of a session asks
        for it several times: the gate, the report, the notes)."""
        key = tuple(self.results)       # (compared by identity)
        if self._merged is None or self._merged[0] != key:
            self._merged = (key, self._merge())
        return self._merged[1]

    def _merge(self) -> EnergyResult:
        return merge_results([pending.resolve() for pending in self.results])


def merge_results(results: Sequence[EnergyResult]) -> EnergyResult:
    """The results of repeated calls of a case as one, whose repetitions are all of theirs."""
    per_gpu = []
    for i, gpu in enumerate(results[0].per_gpu):
        reps = tuple(rep for result in results for rep in result.per_gpu[i].repetitions)
        notes = tuple(sorted({n for result in results for n in result.per_gpu[i].notes}))
        per_gpu.append(replace(gpu, repetitions=reps, notes=notes))
    notes = tuple(sorted({n for result in results for n in result.notes}))
    return EnergyResult(per_gpu=tuple(per_gpu), notes=notes, per_domain=merge_domains(results))


@dataclass(frozen=True)
class SessionTotal:
    """The GPUs' energy over a whole session, as their counters tell it, with the bound of reading
    a counter directly at both ends."""

    ets_j: float
    low_j: float
    high_j: float
    time_s: float
    gpus: int
    simulated: bool
    beyond_wall_s: float = 0.0      # of time_s: the simulated GPUs' work beyond the wall clock (tests' virtual worlds)


class EnergySession:
    def __init__(self, options: SessionOptions, placement: Placement | None = None, *, sim_seed: int | None = None,
                 gpu_order: Sequence[str] = (), workers: int = 1) -> None:
        self.options = options
        self.placement = placement or Placement.from_environment()
        self.gpu_order = tuple(gpu_order)  # an xdist worker: the pool's order its controller chose (UUIDs)
        self.workers = workers             # the controller of ``-n N``: how many GPUs its workers use
        self.claim: Claim | None = None    # the GPUs this session claims on a node shared with other sessions
        self.sim_seed = sim_seed           # the simulator's seed (None: its own, from GPUENERGY_SIM_SEED or random)
        self.backend: Backend | None = None
        self.gpus: list[Gpu] = []          # the pool (--gpu-devices); a test holds some of them (``held``)
        self.held: list[Gpu] = []          # the GPUs of the test that runs now (see ``lease``)
        self.limits: dict[str, PowerLimits] = {}
        self.journal: Journal[int] | None = None
        self.cases: dict[str, CaseRecord] = {}
        self._case_ids: dict[str, list[str]] = {}     # test id -> its cases' ids (regions in order)
        self.active_cap: PowerCap | None = None
        self.active_clock: ClockCap | None = None
        self.clock_journal: Journal[ClockLock] | None = None
        self.repairs: list[str] = []           # what the start of the session repaired
        self.end_repairs: list[str] = []       # what its end repaired (a killed xdist worker's cap)
        self.notices: list[str] = []           # for the end of the session: what the user should know
        self._pending: list[PendingResult] = []   # figures not worked out yet (see ``resolve``)
        self._energy_at_start: tuple[float, float, dict[str, float | None]] = (realtime.monotonic(), 0.0, {})
        self.errors: list[str] = []               # figures that could not be worked out after their test
        self.budget_file: Any = None              # --energy-budgets (gate.budget_file.BudgetFile), loaded at start
        self.on_result: Callable[[str, EnergyResult], None] | None = None   # each case's figures, once worked out
        self.host: HostRecorder | None = None      # --energy-domains with cpu or dram: the host's counters
        self.unparametrised: dict[str, list[str]] = {}   # fixture -> tests pytest could not run once per setting
        self.named_once: dict[str, list[str]] = {}       # why -> tests run once: they are found by their names
        self._cappers: list[PowerCapper | ClockCapper] = []
        self._regions_in_call: dict[str, int] = {}
        self._locks_of: dict[tuple[str, ...], list[Path]] = {}     # see ``_lock_paths``

    # -- lifetime ------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self.backend is not None

    def start(self, *, repair: bool = True) -> None:
        """Open the backend and select GPUs; repair limits a dead run left changed."""
        try:
            self._start(repair)
        except DeviceError as exc:
            self._abandon()
            raise GpuEnergyError(f"reading the GPUs through the {self.options.backend} backend failed: {exc}") from None
        except GpuEnergyError:      # also a journal entry that is damaged or not to be trusted
            self._abandon()
            raise

    def _abandon(self) -> None:
        """Leave the GPUs alone after a failed start: no fixture may use a half-started session."""
        if self.claim is not None:
            self.claim.release()
            self.claim = None
        if self.backend is not None:
            self.backend.close()
        self.backend, self.journal, self.clock_journal, self.gpus = None, None, None, []

    def _start(self, repair: bool) -> None:
        self.backend = open_backend(self.options.backend, sim_seed=self.sim_seed)
        self.gpus = self.backend.select(self.options.gpus)
        self.placement.check(self.gpus)
        self.gpus = self._arrange(self.gpus)
        if not self.backend.simulated:      # the simulator runs no CUDA: backend.use routes its work
            pin_worker(self.gpus, self.placement)
        self.backend.use([])  # the process works on its GPUs only inside tests that hold them
        self.journal = power_journal_for(self.backend)
        self.clock_journal = clock_journal_for(self.backend)
        if repair:
            for journal in journals_for(self.backend):
                for outcome in journal.repair(self.backend):
                    if outcome.action in ("restored", "failed", "changed-since"):
                        self.repairs.append(outcome.message)
        self.limits = {gpu.uuid: retry_transient(gpu.limits, gpu.retry_backoff_s) for gpu in self.gpus}
        self._energy_at_start = self._session_energy()
        self.host_recorder()      # a powercap tree that is missing or unreadable: one line, before any test

    def _arrange(self, pool: list[Gpu]) -> list[Gpu]:
        """The pool in the order this session's processes take it (``placement``): free GPUs first
        where other sessions share the node (``claims``). Workers take the order their controller chose;
        torchrun ranks keep theirs (a rank's GPU is its ``LOCAL_RANK``)."""
        if self.gpu_order:
            return in_order(pool, self.gpu_order)
        if self.placement.kind != "single" or len(pool) < 2:
            return pool
        self.claim = claim_gpus(self._require_backend().lock_folder, pool, self.workers)
        return self.claim.order

    def _session_energy(self) -> tuple[float, float, dict[str, float | None]]:
        """The session's wall time, the time the simulator's tests' worlds kept its GPUs occupied beyond
        it (the energy counts the GPUs idle through that too), and each GPU's energy counter."""
        backend = self._require_backend()
        try:
            readings = {gpu.uuid: backend.session_reading(gpu) for gpu in self.gpus}
        except DeviceError:
            return realtime.monotonic(), 0.0, {}
        beyond_s = max((beyond for _, beyond in readings.values()), default=0.0)
        return realtime.monotonic(), beyond_s, {uuid: energy for uuid, (energy, _) in readings.items()}

    def session_total(self) -> SessionTotal | None:
        """The GPUs' energy over the session so far, from their counters (None without counters):
        every test, and the time between and around them (setup, collection, idle)."""
        if self.backend is None:
            return None
        started, beyond_before_s, before = self._energy_at_start
        ended, beyond_after_s, after = self._session_energy()
        beyond_s = beyond_after_s - beyond_before_s
        drawn = [(gpu, before.get(gpu.uuid), after.get(gpu.uuid)) for gpu in self.gpus]
        if not drawn or any(b is None or a is None for _, b, a in drawn):
            return None
        total_j = sum(a - b for _, b, a in drawn if a is not None and b is not None) / 1000.0
        # Read directly, a counter is up to a period behind at each end: at most that much energy is missed or extra.
        slack_j = (sum(2 * gpu.counter_period_s * self.limits[gpu.uuid].max_mw / 1000.0 for gpu, _, _ in drawn)
                   if not self.backend.simulated else 0.0)
        return SessionTotal(total_j, max(total_j - slack_j, 0.0), total_j + slack_j, ended - started + beyond_s,
                            len(drawn), self.backend.simulated, beyond_s)

    def finish(self, *, repair: bool = False) -> list[str]:
        """Restore anything still capped (a safety net behind the fixture); returns problems.

        With ``repair`` (the process that ran the whole session: not a pytest-xdist worker, whose
        controller outlives it) the journal is repaired once more, so a cap left by a worker that
        was killed comes back now, not at the next session (``end_repairs`` says what was done).
        Every GPU this process still leaves changed is a problem naming its limits.
        """
        problems = []
        for capper in self._cappers:
            try:
                capper.restore()
            except LimitRestoreError as exc:
                problems.append(str(exc))
        self._cappers.clear()
        if self.backend is not None and self.journal is not None:
            try:
                problems += self._after_the_tests(repair)
            except GpuEnergyError as exc:
                problems.append(str(exc))
        if self.claim is not None:
            self.claim.release()
        if self.host is not None:
            self.host.stop()
        if self.backend is not None:
            self.backend.close()
        return problems

    def _after_the_tests(self, repair: bool) -> list[str]:
        assert self.backend is not None and self.journal is not None
        problems: dict[tuple[str, str], str] = {}       # per knob and GPU UUID
        for journal in journals_for(self.backend):
            for outcome in journal.repair(self.backend) if repair else ():
                if outcome.action == "failed":
                    problems[(journal.knob.name, outcome.entry.gpu_uuid)] = outcome.message
                elif outcome.action in ("restored", "changed-since"):
                    self.end_repairs.append(outcome.message)
            for entry in journal.entries():
                if entry.pid == os.getpid() and (journal.knob.name, entry.gpu_uuid) not in problems:
                    problems[(journal.knob.name, entry.gpu_uuid)] = f"{entry.describe()}; it stays so"
        return list(problems.values())

    # -- what the fixtures use -----------------------------------------------------------------
    def header_lines(self) -> list[str]:
        backend = self._require_backend()
        lines = [f"gpuenergy: backend {backend.name}: {backend.label}"]
        settings = backend.sim_settings()
        if settings is not None:
            lines.append(f"  simulator: {settings['clock']} clock, noise {100 * settings['noise']:g} %, seed {settings['seed']} "
                         f"(GPUENERGY_SIM_SEED={settings['seed']} repeats this session's figures)")
        for gpu in sorted(self.gpus, key=lambda g: g.index):
            limits = self.limits[gpu.uuid]
            try:
                method = "energy counter" if gpu.has_energy_counter() else f"power sampling ({gpu.power_source})"
            except DeviceError as exc:
                method = f"energy reading fails ({exc})"
            lines.append(
                f"  GPU {gpu.index}: {gpu.name}, limit {limits.current_mw / 1000:g} W "
                f"(default {limits.default_mw / 1000:g} W, range {limits.range_text()}), {method}"
            )
        lines.append(self._placement_line())
        if self.claim is not None:
            lines.append(f"  this session {self.claim.describe()}")
        caps = ", ".join(c.label for c in self.options.caps)
        lines.append(f"  caps: {caps}" if caps else "  caps: none given, tests run at the current limit")
        if self.options.clocks:
            lines.append(f"  SM clock caps: {', '.join(c.label for c in self.options.clocks)}")
        lines.extend(f"  repaired: {message}" for message in self.repairs)
        return lines

    def _placement_line(self) -> str:
        own = self.placement.own_gpu(self.gpus)
        where = {
            "single": f"GPU {own.index}; a pytest-xdist worker gwN takes the N-th of this session's GPUs, round robin",
            "xdist": f"GPU {own.index} ({self.placement.label})",
            "torchrun": f"GPU {own.index} ({self.placement.label}); results are the total over the ranks",
        }[self.placement.kind]
        return f"  GPUs per test: 1 ({where}); more with @pytest.mark.energy(gpus=N or \"all\")"

    @contextlib.contextmanager
    def lease(self, wanted: int | str = 1, test_id: str | None = None) -> Iterator[list[Gpu]]:
        """Hold the test's GPUs for one test (``wanted``: a count or "all", see ``placement``): no
        other test, in any process, caps or measures them meanwhile (caps never clash and energy is
        never attributed to the wrong test), and only those: tests on other GPUs run side by side.
        On the simulator ``test_id`` starts the test in a world of its own (``Backend.begin_test``)."""
        backend = self._require_backend()
        held = self.placement.gpus_for(self.gpus, wanted)
        self.errors += self.resolve(wait=False)      # what earlier tests measured, where it has arrived
        with holding(self._lock_paths(backend, held), timeout_s=self.options.lock_timeout_s):
            backend.use(held)
            if test_id is not None:
                backend.begin_test(test_id, held)
            if not backend.simulated:
                pin_current_device(held, backend.all_gpus)
            self.held = held
            try:
                yield held
            finally:
                self.held = []
                # On a virtual clock the next test starts its time over: work this test's figures
                # out now (waiting there moves only the simulator's clock).
                problems = self.resolve(wait=True) if backend.virtual_clock is not None else []
                backend.use([])
            if problems:
                raise MeasurementError("; ".join(problems))

    def _lock_paths(self, backend: Backend, held: list[Gpu]) -> list[Path]:
        """The held GPUs' lock files, worked out once per set of GPUs (every test takes them)."""
        key = tuple(gpu.uuid for gpu in held)
        paths = self._locks_of.get(key)
        if paths is None:
            paths = self._locks_of[key] = lock_paths(backend.lock_folder, key)
        return paths

    def test_gpus(self) -> list[Gpu]:
        """The GPUs the running test holds (outside a lease: this process's own GPU)."""
        return list(self.held) if self.held else [self.placement.own_gpu(self._require_gpus())]

    def _require_gpus(self) -> list[Gpu]:
        self._require_backend()
        return self.gpus

    def capper(self) -> PowerCapper:
        backend = self._require_backend()
        assert self.journal is not None
        capper = PowerCapper(self.test_gpus(), self.journal, backend.lock_folder)
        self._cappers.append(capper)
        return capper

    def clock_capper(self) -> ClockCapper:
        backend = self._require_backend()
        assert self.clock_journal is not None
        capper = ClockCapper(self.test_gpus(), self.clock_journal, backend.lock_folder)
        self._cappers.append(capper)
        return capper

    def release(self, capper: PowerCapper | ClockCapper) -> None:
        """Restore and forget a capper (raises ``LimitRestoreError`` if a GPU stays changed)."""
        try:
            capper.restore()
        finally:
            if capper in self._cappers:
                self._cappers.remove(capper)
            self.notices += [n for n in getattr(capper, "notices", ()) if n not in self.notices]

    def cap_context(self) -> CapContext | None:
        cap, clock = self.active_cap, self.active_clock
        if cap is None and clock is None:
            return None
        if cap is None:
            context = current_limits(self.gpus)
        else:
            context = CapContext(
                label=cap.label,
                requested_w={g.gpu_uuid: g.requested_w for g in cap.gpus},
                enforced_w={g.gpu_uuid: g.enforced_w for g in cap.gpus},
                default_w={g.gpu_uuid: g.default_w for g in cap.gpus},
            )
        if clock is not None and clock.spec is not None:
            context = replace(context, clock_label=clock.label,
                              sm_clock_cap_mhz={g.gpu_uuid: g.enforced_mhz for g in clock.gpus})
        return context

    def meter(self, test_id: str, *, compute_bound: float | None = None, min_time_s: float | None = None,
              work: Any = None, record: bool = True) -> EnergyMeter:
        """A meter on the running test's GPUs whose results are the test's cases (unless ``record`` is
        off: a bridge that writes its figures elsewhere, pytest-benchmark's ``extra_info``)."""
        backend = self._require_backend()
        return EnergyMeter(
            backend,
            self.test_gpus(),
            cap_context=self.cap_context,
            compute_bound=compute_bound,
            min_time_s=self.options.min_time_s if min_time_s is None else min_time_s,
            on_result=(lambda result: self.record(test_id, result)) if record else None,
            work=work,
            rank_group=current_group,
            host=self.host_recorder(),
        )

    def host_recorder(self) -> HostRecorder | None:
        """The host's counters for ``--energy-domains`` (None for the GPUs alone): started with the
        session, and again once the simulator's virtual clock starts a test's world afresh."""
        domains = tuple(d for d in self.options.domains if d in ("cpu", "dram"))
        backend = self._require_backend()
        if not domains or (self.host is not None and self.host.is_alive()):
            return self.host
        if self.host is not None:
            self.host.raise_error()
        simulator = getattr(backend, "nvml", None) if backend.simulated else None
        self.host = open_host(domains, simulator=simulator, clock=backend.clock, virtual=backend.virtual_clock)
        return self.host

    @property
    def leased(self) -> bool:
        """Whether a test holds its GPUs now (``lease``)."""
        return bool(self.held)

    def begin_attempt(self, test_id: str) -> None:
        """A test (re)starts from its setup: what an earlier attempt measured is dropped (a rerun of a
        flaky test, pytest-rerunfailures, must not average its failed attempts into the case)."""
        for case_id in self._case_ids.pop(test_id, []):
            self.cases.pop(case_id, None)
        self.begin_call(test_id)

    def begin_call(self, test_id: str) -> None:
        """A (re)call of the test starts: its regions are numbered from the first again."""
        self._regions_in_call[test_id] = 0

    def record(self, test_id: str, result: PendingResult) -> None:
        number = self._regions_in_call.get(test_id, 0) + 1
        self._regions_in_call[test_id] = number
        case_id = test_id if number == 1 else f"{test_id}#{number}"
        self._case(case_id).results.append(result)
        if self.on_result is not None:
            on_result = self.on_result
            result.then(lambda figures: on_result(case_id, figures))
        if not result.resolved:
            self._pending.append(result)

    def resolve(self, *, wait: bool) -> list[str]:
        """Work out the figures still pending: those whose publications have arrived (``wait=False``,
        at no cost: between tests), or all (waiting for the last ones: the end of a session, or of a
        test on a simulator's virtual clock, whose time starts over with the next test). Returns one
        line per figure that could not be worked out (its case is dropped).

        Without waiting, the first figure not ready ends the round: the pending regions ended in this
        order, so the publications the later ones need are not there either. (A long region can need
        one publication fewer than a short one before it, and then waits a period longer.) With tests
        of a few ms and a counter published every 100 ms, dozens are pending at once, and asking
        each of them at every test cost more than the figures themselves."""
        problems, still = [], []
        for index, pending in enumerate(self._pending):
            try:
                found = pending.resolve() if wait else pending.try_resolve()
            except GpuEnergyError as exc:
                problems.append(str(exc))
                continue
            if found is None:
                still.extend(self._pending[index:])
                break
        self._pending = still
        if problems:
            self._drop_failed()
        return problems

    def _drop_failed(self) -> None:
        for case_id, record in list(self.cases.items()):
            record.results = [p for p in record.results if not _failed(p)]
            if not record.results:
                del self.cases[case_id]
                self._case_ids[node_id_of(case_id)].remove(case_id)

    def _case(self, case_id: str) -> CaseRecord:
        """The case's record, made (and indexed by its test) if it is new."""
        record = self.cases.get(case_id)
        if record is None:
            record = self.cases[case_id] = CaseRecord(case_id)
            self._case_ids.setdefault(node_id_of(case_id), []).append(case_id)
        return record

    def coarse_cases(self) -> list[str]:
        """The cases with a region too short for its bound to say much (their figures worked out)."""
        return [case_id for case_id, record in self.cases.items()
                if any(p.resolved and not _failed(p) and p.resolve().coarse for p in record.results)]

    def set_outcome(self, test_id: str, outcome: Outcome) -> None:
        """How the test ended, for all of its cases (``runs.records.OUTCOMES``)."""
        for case in self.cases_of(test_id):
            case.outcome = outcome

    def outcomes(self) -> dict[str, Outcome]:
        return {case_id: record.outcome for case_id, record in self.cases.items()}

    def export_cases(self) -> str:
        """The cases as JSON, for a pytest-xdist worker to hand to the controller."""
        return json.dumps([
            [case_id, [entry.to_json() for entry in CaseEntry.entries_of(case_id, record.merged, record.outcome)]]
            for case_id, record in self.cases.items()
        ])

    def import_cases(self, exported: str) -> None:
        """Add a worker's cases (see ``export_cases``); a case id is never measured by two workers."""
        for case_id, data in json.loads(exported):
            entries = [CaseEntry.from_json(entry, "a pytest-xdist worker's results") for entry in data]
            record = self._case(case_id)
            record.results.append(PendingResult.of(EnergyResult(per_gpu=tuple(entries),
                                                                per_domain=entries[0].per_domain if entries else {})))
            record.outcome = entries[0].outcome if entries else PASSED

    def junit_properties(self, test_id: str) -> list[tuple[str, object]]:
        """The figures of a test's cases, for ``--junitxml`` (one set per region and GPU).

        Named by the GPU's place among the test's GPUs (``energy.gpu0`` is the test's first GPU),
        not by its index: under pytest-xdist a test runs on whichever GPU its worker has, and its
        property names must not change from run to run. The index is a property of its own.
        """
        properties: list[tuple[str, object]] = []
        for case in self.cases_of(test_id):
            for slot, gpu in enumerate(case.merged.per_gpu):
                summary = gpu.summary
                prefix = f"energy.gpu{slot}" + (f".region{case.test_id.rsplit('#', 1)[1]}" if case.test_id != test_id else "")
                properties += [
                    (f"{prefix}.ets_j", round(summary.ets_j, 6)), (f"{prefix}.time_s", round(summary.time_s, 6)),
                    (f"{prefix}.edp_js", round(summary.edp_js, 6)), (f"{prefix}.mean_power_w", round(summary.mean_power_w, 3)),
                    (f"{prefix}.n", summary.n), (f"{prefix}.cap", gpu.cap),
                    (f"{prefix}.limit_enforced_w", gpu.limit_enforced_w), (f"{prefix}.gpu", gpu.gpu_name),
                    (f"{prefix}.gpu_index", gpu.gpu_index),
                    (f"{prefix}.method", gpu.method), (f"{prefix}.simulated", gpu.simulated),
                ]
        return properties

    def cases_of(self, test_id: str) -> list[CaseRecord]:
        return [self.cases[case_id] for case_id in self._case_ids.get(test_id, [])]

    # -- budgets -------------------------------------------------------------------------------
    def budget_failures(self, test_id: str, budgets: Sequence[Budget], file_key: str | None = None) -> list[str] | None:
        """One line per GPU and region that misses its budget (empty when all pass; None where the test
        has no budget): the test's ``budgets`` (its markers), or without any, the budgets file's for
        ``file_key`` (the test's id without its settings, ``gate.budget_file.test_key``) and each case's region."""
        per_case = {case.test_id: list(budgets) or self._file_budgets(file_key, case.test_id) for case in self.cases_of(test_id)}
        if not budgets and not any(per_case.values()):
            return None if per_case or not self._file_budgets(file_key, test_id) else [NOTHING_MEASURED]
        if not per_case:
            return [NOTHING_MEASURED]
        if self._within_budgets_at_most(test_id, per_case):
            return []
        lines = []
        for case in self.cases_of(test_id):
            merged = case.merged
            number = split_region(case.test_id)[1]
            for gpu in merged.per_gpu:
                line = self._check_gpu(case.test_id, gpu, per_case[case.test_id])
                if line:
                    lines.append(line)
                if (gpu_limits := self.limits.get(gpu.gpu_uuid)) is not None:
                    lines += phase_failures(per_case[case.test_id], gpu, gpu_limits,
                                            f" [{number}. region]" if number is not None else "")
            limits = self.limits.get(merged.per_gpu[0].gpu_uuid)
            if limits is not None:
                where = (f" [{number}. region]" if number is not None else "") + f" at cap {merged.per_gpu[0].cap}"
                lines += domain_failures(per_case[case.test_id], merged, limits, where)
        return lines

    def _file_budgets(self, file_key: str | None, case_id: str) -> list[Budget]:
        if self.budget_file is None or file_key is None:
            return []
        region = split_region(case_id)[1]
        return self.budget_file.budgets_for(file_key + (f"#{region}" if region is not None else ""))

    def _check_gpu(self, case_id: str, gpu: GpuResult, budgets: Sequence[Budget]) -> str | None:
        limits = self.limits.get(gpu.gpu_uuid)
        number = split_region(case_id)[1]
        return gpu_budget_line(gpu, budgets, limits, f" [{number}. region]" if number is not None else "") if limits else None

    def _within_budgets_at_most(self, test_id: str, per_case: dict[str, list[Budget]]) -> bool:
        """Whether every case meets its budgets with each GPU's ETS at the upper end of its bound from
        the reads so far (``PendingResult.at_most``): the figures worked out later lie within that
        bound, so the verdict is the same without waiting for them. Phase and domain budgets wait."""
        for case in self.cases_of(test_id):
            budgets = per_case[case.test_id]
            if any(b.domain != "gpu" or b.phase is not None for b in budgets):
                return False
            found = [r for r in (p.at_most() for p in case.results) if r is not None]
            if budgets and (len(found) < len(case.results) or any(
                    self._check_gpu(case.test_id, gpu, budgets) for gpu in merge_results(found).per_gpu)):
                return False
        return True

    def _require_backend(self) -> Backend:
        if self.backend is None:
            raise MeasurementError("the gpuenergy session has not started")
        return self.backend


def _failed(pending: PendingResult) -> bool:
    """Whether working out this figure failed (it raised); pending figures count as not failed."""
    if not pending.resolved:
        return False
    try:
        pending.resolve()
    except GpuEnergyError:
        return True
    return False
