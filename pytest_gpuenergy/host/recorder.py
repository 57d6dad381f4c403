"""Following the host's RAPL counters through a session, so that no wrap goes unseen.

Each zone's ``energy_uj`` wraps to 0 beyond ``max_energy_range_uj``: about 262 kJ on Intel servers
(72 minutes at 60 W, 9 minutes at 500 W), but 65.5 kJ on AMD Zen (a 32-bit counter of 15.3 uJ
units: 234 s at 280 W, as turbostat reports). A difference of two reads is right only if the
counter wrapped at most once between them and no more than ``range`` was drawn, so the recorder
reads every zone at least every half ``range / PLAUSIBLE_MAX_W`` (a thread on the host's clock;
on the simulator's virtual clock a plan it wakes at exactly those moments, since virtual time
jumps with work and a thread would miss them) and at both edges of every measured region.
Where two reads inside a region lay further apart than that (a stalled host), the figure says so
in a note and its upper bound takes in every wrap that could have gone unseen.

The bound of a region's figure: each edge read may be up to one update (about 1 ms, Intel SDM
vol. 3B 15.10.3; "0.000977 sec" in turbostat) old, worth the domain's power over that time, and
each read is quantised to the counter's unit (at most 61 uJ, 2^-14 J on Intel servers). A region
of two updates or less says nothing of its power by its reading (``_short_figure``).
"""

from __future__ import annotations

import bisect
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Final

from .. import realtime
from ..errors import HostEnergyError
from .powercap import POWERCAP_ROOT_ENV, HostDomain, RealSysfs, Sysfs, Zone, find_zones, powercap_root, read_counter_uj

UPDATE_S: Final = 0.001               # RAPL publishes its counters about every millisecond
RESOLUTION_UJ: Final = 61.04          # the coarsest unit RAPL counts in (2^-14 J); each read is that coarse
# The most a zone can plausibly draw (W): far above any package's or DRAM's rating, so that reads
# this far apart cannot miss a wrap. 500 W covers the largest server packages (AMD EPYC 9005: 500 W TDP).
PLAUSIBLE_MAX_W: Final[Mapping[HostDomain, float]] = {"cpu": 500.0, "dram": 200.0}
_POLL_SHARE = 0.5                     # read within half the time the counter takes to wrap at that power
_MIN_POLL_S = 0.001
_MAX_POLL_S = 60.0
_KEEP_POLLS = 200_000
# A region this short may see no publication of the counters, or one more than it lasted: its reading
# says nothing of its power (see ``_short_figure``).
SHORT_S: Final = 2 * UPDATE_S
LOOKBACK_S: Final = 0.01              # a short region's power is the host's over at least this long


@dataclass(frozen=True)
class HostMark:
    """The host's counters at one moment: per domain, the energy since recording began (uJ)."""

    at: float
    totals_uj: Mapping[HostDomain, int]


@dataclass(frozen=True)
class HostFigure:
    """One domain's energy between two marks, with the bound that holds the truth (J)."""

    domain: HostDomain
    ets_j: float
    low_j: float
    high_j: float
    note: str | None = None


@dataclass
class _Track:
    zone: Zone
    last_raw: int
    total_uj: int = 0


@dataclass
class HostRecorder:
    """Reads the ``domains``' zones through ``sysfs`` under ``root`` on ``clock``, all session.

    ``virtual``: a simulator's virtual clock (``sim.clock.VirtualClock``), which then runs the
    polling as a plan instead of a thread. ``simulated``: the zones are the simulator's.
    """

    sysfs: Sysfs
    root: PurePath
    domains: tuple[HostDomain, ...]
    clock: Callable[[], float]
    virtual: Any = None
    simulated: bool = False
    zones: list[Zone] = field(init=False)
    period_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.zones = find_zones(self.sysfs, self.root, self.domains)
        self.period_s = min(max(_POLL_SHARE * z.range_uj / 1e6 / PLAUSIBLE_MAX_W[z.domain], _MIN_POLL_S)
                            for z in self.zones)
        self.period_s = min(self.period_s, _MAX_POLL_S)
        self._lock = threading.Lock()
        self._tracks = [_Track(zone, read_counter_uj(self.sysfs, zone)) for zone in self.zones]
        self._polls: list[float] = [self.clock()]
        self._totals_at: list[dict[HostDomain, int]] = [self._totals_locked()]   # the totals at each poll
        self.error: HostEnergyError | None = None
        self._stopping = threading.Event()
        self._plan: Any = None
        self._thread: threading.Thread | None = None
        if self.virtual is not None:
            self._plan = self.virtual.start(self._schedule(), self._failed)
        else:
            self._thread = threading.Thread(target=self._run, name="gpuenergy-powercap", daemon=True)
            self._thread.start()

    # -- what the meter uses --------------------------------------------------------------------
    def mark(self) -> HostMark:
        """Read every zone now (a region's edge); what stopped the recorder is raised here."""
        self.raise_error()
        with self._lock:
            self._poll_locked()
            return HostMark(self._polls[-1], self._totals_at[-1])     # the totals that read recorded

    def _totals_locked(self) -> dict[HostDomain, int]:
        totals: dict[HostDomain, int] = {}
        for track in self._tracks:
            totals[track.zone.domain] = totals.get(track.zone.domain, 0) + track.total_uj
        return totals

    def figures(self, start: HostMark, end: HostMark) -> list[HostFigure]:
        """Each domain's energy from ``start`` to ``end``, with its bound and, where reads lay too
        far apart to rule out a wrap unseen, a note and the bound widened to cover it."""
        duration = end.at - start.at
        with self._lock:
            first = bisect.bisect_left(self._polls, start.at)
            last = bisect.bisect_right(self._polls, end.at)
            times = self._polls[first:last]
            before = max(bisect.bisect_right(self._polls, end.at - LOOKBACK_S) - 1, 0)
            lookback = (self._polls[before], self._totals_at[before])
        gap = max((b - a for a, b in zip(times, times[1:])), default=0.0)
        found = []
        for domain in self.domains:
            zones = [z for z in self.zones if z.domain == domain]
            reading_j = (end.totals_uj[domain] - start.totals_uj[domain]) / 1e6
            unseen_j, note = _unseen_wraps(zones, gap, domain)
            if duration <= SHORT_S:
                found.append(_short_figure(domain, zones, reading_j, duration, end, lookback, (unseen_j, note)))
                continue
            # Each edge's read may be one update old: at constant power P the reading is at least
            # P (duration - one update), so the power that staleness is worth is at most this.
            edge_w = reading_j / (duration - UPDATE_S)
            half_j = len(zones) * (2 * RESOLUTION_UJ / 1e6 + edge_w * UPDATE_S)
            found.append(HostFigure(domain, reading_j, max(reading_j - half_j, 0.0), reading_j + half_j + unseen_j, note))
        return found

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def is_alive(self) -> bool:
        if self.error is not None:
            return False
        if self._plan is not None:
            return bool(self._plan.alive)
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stopping.set()
        if self._plan is not None:
            self._plan.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    # -- polling --------------------------------------------------------------------------------------
    def _schedule(self) -> Iterator[float]:
        while True:
            with self._lock:
                self._poll_locked()
            yield self.clock() + self.period_s

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.period_s):
                with self._lock:
                    self._poll_locked()
        except HostEnergyError as exc:
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self.error = exc if isinstance(exc, HostEnergyError) else HostEnergyError(
            f"reading the host's powercap counters failed: {type(exc).__name__}: {exc}")

    def _poll_locked(self) -> None:
        now = self.clock()
        for track in self._tracks:
            raw = read_counter_uj(self.sysfs, track.zone)
            track.total_uj += (raw - track.last_raw) % track.zone.range_uj    # a wrap: past the range, from 0
            track.last_raw = raw
        if now >= self._polls[-1]:
            self._polls.append(now)
            self._totals_at.append(self._totals_locked())
            if len(self._polls) > _KEEP_POLLS:
                del self._polls[: _KEEP_POLLS // 2]
                del self._totals_at[: _KEEP_POLLS // 2]


def _short_figure(domain: HostDomain, zones: Sequence[Zone], reading_j: float, duration: float, end: HostMark,
                  lookback: tuple[float, Mapping[HostDomain, int]], unseen: tuple[float, str | None]) -> HostFigure:
    """A region of at most two of the counters' updates: its reading may hold no publication (0 J
    for work done) or one more than the region lasted (five times its energy at 0.2 ms). Its bound
    takes each edge's staleness at the most a zone can plausibly draw; its figure is the host's power
    over the last ``LOOKBACK_S`` or more (since the recorder's first read, if younger) times the
    region's length, within that bound (and wraps that could hide in it: ``unseen``, the energy and the note)."""
    unseen_j, note = unseen
    half_j = len(zones) * (2 * RESOLUTION_UJ / 1e6 + PLAUSIBLE_MAX_W[domain] * UPDATE_S)
    low_j, high_j = max(reading_j - half_j, 0.0), reading_j + half_j + unseen_j
    since, totals = lookback
    window_s = end.at - since
    power_w = (end.totals_uj[domain] - totals[domain]) / 1e6 / window_s if window_s > SHORT_S else reading_j / max(duration, UPDATE_S)
    ets_j = min(max(power_w * duration, low_j), high_j)
    short = (f"the region ({duration * 1000:.2g} ms) is at most two updates of the host's {domain} counters (about "
             f"1 ms): its {domain} ETS is the host's power over the last {window_s:.2g} s times the region's time")
    return HostFigure(domain, ets_j, low_j, high_j, f"{note}; {short}" if note else short)


def _unseen_wraps(zones: Sequence[Zone], gap_s: float, domain: HostDomain) -> tuple[float, str | None]:
    """How much energy wraps that two reads ``gap_s`` apart could have hidden (J), and the note."""
    hidden_j = 0.0
    for zone in zones:
        wraps = math.floor(gap_s * PLAUSIBLE_MAX_W[domain] / (zone.range_uj / 1e6))
        hidden_j += wraps * zone.range_uj / 1e6
    if hidden_j == 0:
        return 0.0, None
    shortest = min(zone.range_uj for zone in zones) / 1e6
    return hidden_j, (
        f"the {domain} counters (range {shortest:.4g} J) were read {gap_s:.3g} s apart during the region, long "
        f"enough to wrap unseen at up to {PLAUSIBLE_MAX_W[domain]:g} W: the {domain} ETS may be short by up to "
        f"{hidden_j:.4g} J (its upper bound says so); a host too busy to run the polling thread does this")


def open_host(domains: Sequence[HostDomain], *, simulator: Any = None, clock: Callable[[], float] | None = None,
              virtual: Any = None) -> HostRecorder:
    """The recorder of the host's ``domains``: the real powercap tree (``GPUENERGY_POWERCAP_ROOT``, else
    ``/sys/class/powercap``) on the host's clock; or, on the GPU simulator (``simulator``, its
    ``clock`` and ``virtual`` clock) with no root set, the simulator's tree on the simulator's clock."""
    if simulator is not None and not os.environ.get(POWERCAP_ROOT_ENV, "").strip():
        from ..sim.powercap import SimulatedPowercap

        tree = SimulatedPowercap(simulator)
        return HostRecorder(tree, tree.root, tuple(domains), clock or simulator.clock.now, virtual=virtual,
                            simulated=True)
    return HostRecorder(RealSysfs(), powercap_root(), tuple(domains), realtime.perf_counter)
