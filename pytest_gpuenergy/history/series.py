"""A storage folder's runs as series: one per case, cap, GPU model and backend, one point per commit.

A team that saves a run on every merge holds its suite's history in the storage folder. To ask "when
did this test start costing more" the runs must be in the order of the code they measured: by the
commit's date where the storage folder lies in a git repository that knows every run's commit (a run
of an older commit saved later still lands where its code belongs), else by the time each run was
saved. Several runs of one commit (a sharded suite, a re-run) are one point: the mean of their log
means, so a commit measured twice counts once and is less noisy.

A damaged file is skipped with a note naming it: a history of hundreds of runs stays readable when
one old file is bad, and unlike the gate's baseline (``RunStore.runs``) nothing is decided from the
newest run alone. Only passed cases count, as in the gate.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import repeat
from pathlib import Path

from ..errors import SettingError, StorageError
from ..metrics import METRIC_TABLE, Metric
from ..runs.reader import load_document
from ..runs.records import CaseEntry, RunDocument
from ..runs.store import RunStore

COMMIT_DATE = "commit date"
RUN_TIME = "run time"
_GIT_TIMEOUT_S = 20.0
# From this many files on they are read by a process per CPU (up to MAX_READERS): reading checks every
# field of every case (``runs/reader.py``), 30 ms for a run of 200 cases, and the history of a team that
# saves a run per merge holds hundreds. Fewer are read here: starting the processes would cost more.
PARALLEL_FROM = 32
MAX_READERS = 8


@dataclass(frozen=True)
class Selection:
    """Which series and which part of the history to read (``gpuenergy history`` options).

    ``tests``: a case is kept when any text is part of its case id (``-k``-like substrings, or whole
    node ids); ``gpu_models``: parts of the GPU model's name, any case; ``caps``: exact cap labels.
    ``since``/``until``: the dates the history is ordered by; ``commits``: ``(first, last)`` commit id
    prefixes, both kept (either may be None: from the start, to the end).
    """

    tests: tuple[str, ...] = ()
    gpu_models: tuple[str, ...] = ()
    caps: tuple[str, ...] = ()
    backend: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    commits: tuple[str | None, str | None] = (None, None)
    metric: str = "ets"

    def wants_run(self, doc: RunDocument) -> bool:
        if self.backend is not None and doc.backend != self.backend:
            return False
        model = doc.gpu_model.lower()
        return not self.gpu_models or any(part.lower() in model for part in self.gpu_models)

    def wants_case(self, entry: CaseEntry) -> bool:
        if not entry.passed:
            return False
        if self.caps and entry.cap not in self.caps:
            return False
        return not self.tests or any(text in entry.case_id or text == entry.test for text in self.tests)


@dataclass(frozen=True)
class Station:
    """One place in the history: a commit (all its runs), or a run that names no commit."""

    commit: str | None        # the commit id; None for a run saved outside a git checkout
    label: str                # the short commit id (``+dirty`` when the checkout had changes), or the run id
    at: datetime              # what the history is ordered by: the commit's date or the run's time
    run_ids: tuple[str, ...]
    simulated: bool


@dataclass(frozen=True)
class Point:
    """One series at one station: the metric's mean per call and what is known of its noise."""

    station: int              # index into ``History.stations``
    mean: float               # the metric's mean per call (ETS in J by default), over the station's runs
    within_var: float         # variance of the log mean from the repetitions alone (0 with one repetition)
    low: float | None         # the meter's bound on the mean ETS (None for T, or before bounds existed)
    high: float | None
    energy_j: float           # GPU energy of every call of every repetition: what this case cost here
    repetitions: int

    @property
    def log_mean(self) -> float:
        return math.log(self.mean)


@dataclass(frozen=True)
class SeriesKey:
    """What a series is: a case at a cap on a GPU model and backend (and the GPU's place in the case)."""

    case_id: str
    test: str
    cap: str
    gpu_model: str
    backend: str
    gpu_slot: int = 0


@dataclass(frozen=True)
class Series:
    key: SeriesKey
    simulated: bool
    points: tuple[Point, ...]


@dataclass(frozen=True)
class RunEnergy:
    """A run's GPU energy in the measured regions of the series read (what it cost)."""

    run_id: str
    station: int
    energy_j: float
    simulated: bool


@dataclass(frozen=True)
class History:
    storage: Path
    metric: Metric
    order: str                         # COMMIT_DATE or RUN_TIME
    stations: tuple[Station, ...]
    series: tuple[Series, ...]
    runs: tuple[RunEnergy, ...]
    skipped: tuple[str, ...] = ()      # damaged files, each "path: problem"
    notes: tuple[str, ...] = field(default=())

    @property
    def simulated(self) -> bool:
        return any(s.simulated for s in self.stations)


# -- reading ----------------------------------------------------------------------------------------

@dataclass
class _Pending:
    """A run reduced to what the history keeps of it (the document itself is dropped: 500 runs)."""

    run_id: str
    created_at: datetime
    commit: str | None
    dirty: bool
    simulated: bool
    points: dict[SeriesKey, tuple[float, float, float | None, float | None, float, int, bool]]


def read_history(storage: str | os.PathLike[str], selection: Selection = Selection()) -> History:
    """Every readable run in ``storage`` that ``selection`` wants, as series ordered by commit date.

    Raises ``StorageError`` when the folder is missing or holds no run, ``SettingError`` when a
    commit of ``selection.commits`` is not in the history.
    """
    store = RunStore(storage)
    if not store.folder.is_dir():
        raise StorageError(f"{store.folder}: no such storage folder; give the folder pytest --energy-save wrote "
                           f"(--energy-storage, default .energy in the rootdir)")
    metric = METRIC_TABLE[selection.metric]
    files = store.files()
    if not files:
        raise StorageError(f"{store.folder} holds no saved run (no <backend>/<gpu-model>/<run>.json files); "
                           f"save runs with: pytest --energy-save --energy-storage={store.folder}")
    pending: list[_Pending] = []
    skipped: list[str] = []
    for read in _read_all(files, selection, metric):
        if isinstance(read, str):
            skipped.append(read)
        elif read is not None:
            pending.append(read)
    if not pending:
        raise StorageError(_nothing_read(store.folder, len(files), skipped, selection))
    order, dates, notes = _commit_order(store.folder, pending)
    stations, station_of = _stations(pending, dates)
    stations, station_of = _cut(stations, station_of, selection)
    series = _series(pending, station_of)
    runs = tuple(RunEnergy(p.run_id, station_of[p.run_id], sum(v[4] for v in p.points.values()), p.simulated)
                 for p in pending if p.run_id in station_of)
    if not series:
        wanted = ", ".join(([f"-k {' '.join(selection.tests)}"] if selection.tests else [])
                           + ([f"--cap {','.join(selection.caps)}"] if selection.caps else []))
        raise SettingError(f"no passed case in the {len(station_of)} runs read {'matches ' + wanted if wanted else 'is left'}; "
                           f"see the cases with: gpuenergy runs --storage {store.folder}")
    return History(storage=store.folder, metric=metric, order=order, stations=tuple(stations), series=tuple(series),
                   runs=runs, skipped=tuple(skipped), notes=tuple(notes))


def _nothing_read(folder: Path, files: int, skipped: Sequence[str], selection: Selection) -> str:
    if len(skipped) == files:
        return f"none of the {files} run files in {folder} could be read; the first: {skipped[0]}"
    wanted = [f"GPU model {', '.join(selection.gpu_models)}" if selection.gpu_models else "",
              f"backend {selection.backend}" if selection.backend else ""]
    return (f"no saved run in {folder} is of {' and '.join(w for w in wanted if w)}; list the runs with: "
            f"gpuenergy runs --storage {folder}")


def _read_all(files: Sequence[Path], selection: Selection, metric: Metric) -> list[_Pending | str | None]:
    """Each file read and reduced (in file order): what the history keeps, a problem, or None (not wanted)."""
    readers = min(MAX_READERS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if len(files) < PARALLEL_FROM or readers < 2:
        return [_read_one(path, selection, metric) for path in files]
    with ProcessPoolExecutor(max_workers=readers) as pool:
        return list(pool.map(_read_one, files, repeat(selection), repeat(metric), chunksize=8))


def _read_one(path: Path, selection: Selection, metric: Metric) -> _Pending | str | None:
    try:
        doc = load_document(path)
    except StorageError as exc:
        return str(exc)
    return _reduce(doc, selection, metric) if selection.wants_run(doc) else None


def _reduce(doc: RunDocument, selection: Selection, metric: Metric) -> _Pending:
    commit = doc.commit or {}
    points = {}
    for entry in doc.cases:
        if not selection.wants_case(entry):
            continue
        key = SeriesKey(entry.case_id, entry.test, entry.cap, doc.gpu_model, doc.backend, entry.gpu_slot)
        points[key] = _figures(entry, metric)
    commit_id = commit.get("id")
    return _Pending(doc.run_id, doc.created_at, commit_id if isinstance(commit_id, str) and commit_id else None,
                    bool(commit.get("dirty")), doc.simulated, points)


def _figures(entry: CaseEntry, metric: Metric) -> tuple[float, float, float | None, float | None, float, int, bool]:
    """(mean, within-run variance of the log mean, bound low, bound high, energy J, repetitions, simulated).

    Plain sums, not ``statistics``: this runs for every case of every run (100,000 times for 500 runs)."""
    reps = entry.repetitions
    count = len(reps)
    values = [float(getattr(rep, metric.field)) for rep in reps]
    mean = sum(values) / count
    within = 0.0
    if count > 1 and mean > 0:     # the variance of the values scaled to a mean of 1, over n: that of the log mean
        within = sum((v / mean - 1.0) ** 2 for v in values) / (count - 1) / count
    low = high = None
    if metric.key == "ets":
        lows = [r.ets_low_j for r in reps if r.ets_low_j is not None]
        highs = [r.ets_high_j for r in reps if r.ets_high_j is not None]
        if len(lows) == len(highs) == count:
            low, high = sum(lows) / count, sum(highs) / count
    energy = sum(rep.ets_j * rep.calls for rep in reps)
    return mean, within, low, high, energy, count, entry.simulated


# -- the order --------------------------------------------------------------------------------------

def _commit_order(folder: Path, pending: Sequence[_Pending]) -> tuple[str, dict[str, datetime], list[str]]:
    """COMMIT_DATE with each commit's date when git knows every run's commit, else RUN_TIME (and why)."""
    commits = {p.commit for p in pending}
    if None in commits:
        without = sum(1 for p in pending if p.commit is None)
        return RUN_TIME, {}, [f"ordered by run time: {without} of {len(pending)} runs name no commit "
                              f"(saved outside a git checkout)"]
    dates = git_commit_dates(folder)
    unknown = sorted(c for c in commits if c is not None and c not in dates)
    if unknown:
        where = "no git repository holds the storage folder" if not dates else \
            f"{len(unknown)} of {len(commits)} commits are not in the git repository at {folder} (first: {unknown[0][:10]})"
        return RUN_TIME, {}, [f"ordered by run time: {where}"]
    return COMMIT_DATE, {c: dates[c] for c in commits if c is not None}, []


def git_commit_dates(folder: Path) -> dict[str, datetime]:
    """Every commit the repository holding ``folder`` knows, with its committer date; {} without git."""
    try:
        proc = subprocess.run(["git", "log", "--all", "--format=%H %ct"], cwd=folder, capture_output=True, text=True,
                              timeout=_GIT_TIMEOUT_S, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    if proc.returncode != 0:
        return {}
    dates = {}
    for line in proc.stdout.splitlines():
        commit, _, stamp = line.partition(" ")
        if stamp.strip().isdigit():
            dates[commit] = datetime.fromtimestamp(int(stamp), timezone.utc)
    return dates


def _stations(pending: Sequence[_Pending], dates: dict[str, datetime]) -> tuple[list[Station], dict[str, int]]:
    groups: dict[str, list[_Pending]] = {}
    for run in pending:
        groups.setdefault(run.commit or f"run:{run.run_id}", []).append(run)

    def when(runs: list[_Pending]) -> tuple[datetime, datetime, str]:
        first = min(runs, key=lambda r: (r.created_at, r.run_id))
        return (dates.get(first.commit or "", first.created_at), first.created_at, first.run_id)

    ordered = sorted(groups.values(), key=when)
    stations, station_of = [], {}
    for index, runs in enumerate(ordered):
        runs.sort(key=lambda r: (r.created_at, r.run_id))
        commit = runs[0].commit
        label = commit[:10] + ("+dirty" if any(r.dirty for r in runs) else "") if commit else runs[0].run_id
        stations.append(Station(commit, label, when(runs)[0], tuple(r.run_id for r in runs), any(r.simulated for r in runs)))
        station_of.update({r.run_id: index for r in runs})
    return stations, station_of


def _cut(stations: list[Station], station_of: dict[str, int], selection: Selection) -> tuple[list[Station], dict[str, int]]:
    """The stations ``selection``'s dates and commit range keep, renumbered."""
    first, last = 0, len(stations) - 1
    start, end = selection.commits
    if start is not None:
        first = _commit_index(stations, start, "first")
    if end is not None:
        last = _commit_index(stations, end, "last")
    if first > last:
        raise SettingError(f"--commits {start}..{end}: {start} comes after {end} in the history; swap them")
    keep = [i for i in range(first, last + 1)
            if (selection.since is None or stations[i].at >= selection.since)
            and (selection.until is None or stations[i].at <= selection.until)]
    if not keep:
        dates = f"{stations[first].at:%Y-%m-%d %H:%M} to {stations[last].at:%Y-%m-%d %H:%M} UTC"
        raise SettingError(f"no run is dated between --since and --until: the history runs from {dates}")
    renumber = {old: new for new, old in enumerate(keep)}
    return [stations[i] for i in keep], {run: renumber[i] for run, i in station_of.items() if i in renumber}


def _commit_index(stations: Sequence[Station], prefix: str, which: str) -> int:
    found = [i for i, s in enumerate(stations) if s.commit is not None and s.commit.startswith(prefix)]
    if not found:
        raise SettingError(f"--commits: no run of commit {prefix!r} in the history; list the commits with: "
                           f"gpuenergy runs --by-commit")
    if len({stations[i].commit for i in found}) > 1:
        raise SettingError(f"--commits: {prefix!r} names several commits; give more of the id")
    return found[0] if which == "first" else found[-1]


def _series(pending: Iterable[_Pending], station_of: dict[str, int]) -> list[Series]:
    """Per key, one point per station (several runs of a station: the mean of their log means)."""
    collected: dict[SeriesKey, dict[int, list[tuple]]] = {}
    for run in pending:
        station = station_of.get(run.run_id)
        if station is None:
            continue
        for key, figures in run.points.items():
            collected.setdefault(key, {}).setdefault(station, []).append(figures)
    series = []
    for key in sorted(collected, key=lambda k: (k.gpu_model, k.backend, k.case_id, k.cap, k.gpu_slot)):
        points, simulated = [], False
        for station in sorted(collected[key]):
            found = [f for f in collected[key][station] if f[0] > 0]   # a figure of 0 has no log: nothing to follow
            if not found:
                continue
            simulated = simulated or any(f[6] for f in found)
            k = len(found)
            mean = math.exp(math.fsum(math.log(f[0]) for f in found) / k)
            bounded = all(f[2] is not None and f[3] is not None for f in found)
            points.append(Point(
                station=station, mean=mean, within_var=math.fsum(f[1] for f in found) / (k * k),
                low=statistics.fmean(f[2] for f in found) if bounded else None,
                high=statistics.fmean(f[3] for f in found) if bounded else None,
                energy_j=math.fsum(f[4] for f in found), repetitions=sum(f[5] for f in found),
            ))
        if points:
            series.append(Series(key, simulated, tuple(points)))
    return series
