"""Baselines case by case, and the runs of one commit as one: suites sharded over machines.

A suite split over machines (pytest-xdist on each node, a SLURM array or a Kubernetes indexed Job
across nodes) saves one run per shard into one shared storage folder. "The latest saved run" is
then another shard's, which has none of this shard's cases: every case would read *missing* or
*new*. So the baseline is chosen per case:

    a case's baseline is the latest saved run that has that case, for the same GPU model and
    backend, saved before the run being checked (and not one of its own runs).

That is the only rule: the pytest gate (``compare.baseline_comparison``) and ``gpuenergy compare``
both call :func:`case_baseline`. For a run that is not sharded it is the latest run, as before. The
runs that provide a baseline for at least one case also say which cases went *missing*: those they
have and the new run has not (another shard's cases never do).

:func:`merge_runs` makes one document of several runs (each case from the latest of them that has
it): the shards of one commit for ``gpuenergy compare commit:ID`` and ``gpuenergy runs --by-commit``.
Plain functions of documents, reusable by any runner that collects shards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from ..errors import StorageError
from .records import CaseEntry, RunDocument
from .store import RunStore

COMMIT_PREFIX = "commit:"


def _key(entry: CaseEntry) -> tuple[str, str]:
    return (entry.case_id, entry.cap)


def _ordered(runs: Sequence[RunDocument]) -> list[RunDocument]:
    return sorted(runs, key=lambda d: (d.created_at, d.run_id))


def merge_runs(runs: Sequence[RunDocument]) -> RunDocument:
    """Several runs of one GPU model and backend as one document: each case (with all its GPUs)
    from the latest run that has it. Machine, commit and options are the newest run's; ``sources``
    lists the runs merged. One run comes back as it is."""
    if not runs:
        raise ValueError("merge_runs needs at least one run")
    ordered = _ordered(runs)
    series = {(d.backend, d.gpu_model) for d in ordered}
    if len(series) > 1:
        raise ValueError(f"merge_runs: runs of different GPU models or backends: {sorted(series)}")
    if len(ordered) == 1:
        return ordered[0]
    owner: dict[tuple[str, str], RunDocument] = {}
    for doc in ordered:
        for entry in doc.cases:
            owner[_key(entry)] = doc
    used = [d for d in ordered if any(owner[_key(e)] is d for e in d.cases)]
    if len(used) == 1:
        return used[0]
    cases = [entry for doc in used for entry in doc.cases if owner[_key(entry)] is doc]
    newest = used[-1]
    return replace(
        newest,
        run_id=f"{newest.run_id}+{len(used) - 1}",
        simulated=any(d.simulated for d in used),
        cases=tuple(cases),
        path=None,
        sources=tuple(d.run_id for d in used),
    )


def case_baseline(saved: Sequence[RunDocument], new: RunDocument) -> RunDocument | None:
    """``new``'s baseline, case by case: per case, the latest run in ``saved`` that has it.

    Candidates: the same GPU model and backend, saved before ``new`` (before the first of its runs
    when it is merged from several), and not one of its runs. The result is those runs merged
    (``merge_runs``), so it also holds the cases they have and ``new`` has not: its missing cases.
    None when no candidate has any of ``new``'s cases.
    """
    own = {new.run_id, *new.sources}
    starts = [d.created_at for d in saved if d.run_id in new.sources]
    cut: datetime = min(starts) if starts else new.created_at
    earlier = _ordered([
        d for d in saved
        if d.run_id not in own and d.backend == new.backend and d.gpu_model == new.gpu_model and d.created_at <= cut
    ])
    wanted = {_key(e) for e in new.cases}
    found: set[tuple[str, str]] = set()
    used: list[RunDocument] = []
    for doc in reversed(earlier):
        provides = {_key(e) for e in doc.cases} & (wanted - found)
        if provides:
            used.append(doc)
            found |= provides
        if found == wanted:
            break
    return merge_runs(used) if used else None


@dataclass(frozen=True)
class CommitRuns:
    """The saved runs of one commit on one GPU model and backend (a suite's shards)."""

    commit_id: str
    runs: tuple[RunDocument, ...]

    @property
    def merged(self) -> RunDocument:
        return merge_runs(self.runs)


def by_commit(runs: Sequence[RunDocument]) -> list[CommitRuns]:
    """The runs grouped by commit, GPU model and backend, oldest group first (runs without a commit
    stay on their own: nothing says they belong together)."""
    groups: dict[tuple[str, str, str], list[RunDocument]] = {}
    for doc in _ordered(runs):
        commit = str((doc.commit or {}).get("id") or "")
        key = (commit or f"no commit: {doc.run_id}", doc.backend, doc.gpu_model)
        groups.setdefault(key, []).append(doc)
    found = [CommitRuns(commit if not commit.startswith("no commit: ") else "", tuple(docs))
             for (commit, _, _), docs in groups.items()]
    return sorted(found, key=lambda g: (g.runs[-1].created_at, g.runs[-1].run_id))


def resolve_commit(store: RunStore, ref: str, backend: str | None = None, gpu_model: str | None = None) -> RunDocument:
    """``commit:ID`` (a prefix of the commit id): that commit's runs in ``store``, merged.

    ``backend``/``gpu_model`` narrow it to one series; runs of several left over is an error
    naming them (a comparison is of one GPU model).
    """
    prefix = ref[len(COMMIT_PREFIX):].strip()
    if not prefix:
        raise StorageError(f"{ref!r}: give a commit id after 'commit:' (see: gpuenergy runs --by-commit)")
    docs = [d for d in store.runs(backend, gpu_model) if str((d.commit or {}).get("id") or "").startswith(prefix)]
    if not docs:
        what = " ".join(filter(None, [gpu_model and f"of {gpu_model}", backend and f"({backend})"]))
        raise StorageError(
            f"no saved run {what + ' ' if what else ''}of commit {prefix!r} in {store.folder}; "
            f"list them with: gpuenergy runs --by-commit --storage {store.folder}"
        )
    groups = by_commit(docs)
    commits = sorted({g.commit_id for g in groups})
    if len(commits) > 1:
        raise StorageError(f"commit {prefix!r} is ambiguous in {store.folder}: {', '.join(c[:12] for c in commits)}; "
                           f"give more of the id")
    if len(groups) > 1:
        names = "; ".join(f"{g.runs[0].gpu_model} ({g.runs[0].backend})" for g in groups)
        raise StorageError(f"commit {prefix!r} has runs of {names}: compare one GPU model at a time with --gpu MODEL")
    return groups[0].merged
