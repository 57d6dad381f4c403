"""Reading a run document: every field checked, a damaged file named with what is wrong in it,
never guessed at (``validation.py`` holds the safe JSON and the ranges)."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from ..errors import JsonInputError, StorageError
from ..meter.results import BACKENDS, DOMAINS, METHODS, POWER_SOURCES, Domain, DomainEnergy, PhaseFigures, Repetition
from . import OUTCOMES, PASSED
from .ids import node_id_of
from .records import FORMAT, VERSION, CaseEntry, RunDocument, as_utc, nan_if_none
from .validation import figure_problem, parse_json, shown

_C = TypeVar("_C", bound=str)

# -- reading -------------------------------------------------------------------------------------

def load_document(path: str | os.PathLike[str]) -> RunDocument:
    """Read and check a run document; any problem is a ``StorageError`` naming the file.

    The file is only read: a bad baseline stays as it is for a person to inspect.
    """
    path = Path(path)
    fix = "restore it from version control, or move it out of the storage folder"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise StorageError(f"{path}: cannot read the run document: {exc.strerror or exc}") from None
    if not raw.strip():
        raise StorageError(f"{path}: the run document is empty (a write that did not finish?); {fix}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StorageError(f"{path}: not a run document: not UTF-8 text (byte {exc.start}); {fix}") from None
    try:
        data = parse_json(text)    # no NaN, no 5000-digit integers, no nesting that overflows the stack
    except JsonInputError as exc:
        raise StorageError(f"{path}: corrupt run document: {exc}; {fix}") from None
    return replace(RunDocument.from_json(data, str(path)), path=path)


class DocumentReader:
    """Checks a parsed document field by field, so an error says where the problem is."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, problem: str) -> StorageError:
        return StorageError(
            f"{self.source}: invalid run document: {where}: {problem}; restore the file from version "
            f"control, or move it out of the storage folder"
        )

    def document(self, data: Any) -> RunDocument:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise StorageError(
                f"{self.source}: not a pytest-gpuenergy run document (\"format\" is {shown(found)}, expected "
                f"{FORMAT!r}); keep other files out of the storage folder"
            )
        version = data.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise self.fail("version", f"must be a whole number >= 1, got {shown(version)}")
        if version > VERSION:
            raise StorageError(
                f"{self.source}: run document format version {version} is newer than this pytest-gpuenergy "
                f"reads (version {VERSION}); upgrade it: pip install -U pytest-gpuenergy"
            )
        created = self.text(data, "created_at", "created_at")
        try:
            created_at = as_utc(datetime.fromisoformat(created))
        except ValueError:
            raise self.fail("created_at", f"{shown(created)} is not an ISO 8601 date and time") from None
        cases = self.items(data, "cases", "cases")
        commit = data.get("commit")
        if commit is not None and not isinstance(commit, dict):
            raise self.fail("commit", "must be an object or null")
        return RunDocument(
            run_id=self.text(data, "run_id", "run_id"),
            created_at=created_at,
            backend=self.text(data, "backend", "backend"),
            simulated=self.flag(data, "simulated", "simulated"),
            gpu_model=self.text(data, "gpu_model", "gpu_model"),
            machine=self.mapping(data, "machine", "machine"),
            commit=commit,
            options=self.mapping(data, "options", "options"),
            cases=_with_slots([self.case(item, f"cases[{i}]") for i, item in enumerate(cases)], cases),
        )

    def case(self, data: Any, where: str) -> CaseEntry:
        if not isinstance(data, dict):
            raise self.fail(where, "must be an object")
        reps = self.items(data, "repetitions", where)
        if not reps:
            raise self.fail(f"{where}.repetitions", "is empty; a case has at least one repetition")
        case_id = self.text(data, "case_id", where)
        power_source = data.get("power_source")
        if power_source is not None and power_source not in POWER_SOURCES:
            raise self.fail(f"{where}.power_source", f"must be one of {', '.join(POWER_SOURCES)} or null, got {shown(power_source)}")
        index = data.get("gpu_index")
        if isinstance(index, bool) or not isinstance(index, int):
            raise self.fail(f"{where}.gpu_index", f"must be a whole number, got {shown(index)}")
        notes = self.items(data, "notes", where, optional=True)
        clock_cap = data.get("clock_cap")
        if clock_cap is not None and (not isinstance(clock_cap, str) or not clock_cap):
            raise self.fail(f"{where}.clock_cap", f"must be a non-empty string or absent, got {shown(clock_cap)}")
        slot, rank, host = data.get("gpu_slot", 0), data.get("rank"), data.get("host")
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < 1 << 20:
            raise self.fail(f"{where}.gpu_slot", f"must be a whole number >= 0, got {shown(slot)}")
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < 1 << 31):
            raise self.fail(f"{where}.rank", f"must be a whole number >= 0 or null, got {shown(rank)}")
        if host is not None and not isinstance(host, str):
            raise self.fail(f"{where}.host", f"must be a string or null, got {shown(host)}")
        outcome = self.choice(data, "outcome", where, OUTCOMES, default=PASSED)
        return CaseEntry(
            case_id=case_id,
            test=test if isinstance(test := data.get("test"), str) else node_id_of(case_id),
            cap=self.text(data, "cap", where),
            gpu_index=index,
            gpu_name=self.text(data, "gpu_name", where),
            gpu_uuid=self.text(data, "gpu_uuid", where),
            backend=self.choice(data, "backend", where, BACKENDS),
            simulated=self.flag(data, "simulated", where),
            method=self.choice(data, "method", where, METHODS),
            power_source=power_source,
            limit_requested_w=self.number(data, "limit_requested_w", where, optional=True),
            limit_enforced_w=self.number(data, "limit_enforced_w", where),
            default_limit_w=self.number(data, "default_limit_w", where),
            repetitions=tuple(self.repetition(r, f"{where}.repetitions[{i}]") for i, r in enumerate(reps)),
            notes=tuple(str(n) for n in notes),
            clock_cap=clock_cap,
            sm_clock_cap_mhz=self.number(data, "sm_clock_cap_mhz", where, optional=True),
            gpu_slot=slot, host=host, rank=rank, outcome=outcome,
            per_domain=self.domains(data, where),
        )

    def domains(self, data: dict, where: str) -> dict[Domain, DomainEnergy]:
        """A case's ``per_domain`` (absent: only the GPUs were measured): each figure within its bound."""
        found = data.get("per_domain")
        if found is None:
            return {}
        if not isinstance(found, dict):
            raise self.fail(f"{where}.per_domain", "must be an object")
        domains: dict[Domain, DomainEnergy] = {}
        for name, figure in found.items():
            at = f"{where}.per_domain.{name}"
            domain = self.choice({"domain": name}, "domain", at, DOMAINS)
            if not isinstance(figure, dict):
                raise self.fail(at, "must be an object")
            ets_j, low, high = (self.number(figure, key, at) for key in ("ets_j", "ets_low_j", "ets_high_j"))
            if not low <= ets_j <= high:
                raise self.fail(at, f"ets_low_j <= ets_j <= ets_high_j must hold, got {low!r} <= {ets_j!r} <= {high!r}")
            domains[domain] = DomainEnergy(ets_j, low, high, self.flag(figure, "simulated", at))
        return domains

    def repetition(self, data: Any, where: str) -> Repetition:
        if not isinstance(data, dict):
            raise self.fail(where, "must be an object")
        calls = data.get("calls", 1)
        if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
            raise self.fail(f"{where}.calls", f"must be a whole number >= 1, got {calls!r}")
        ets_j = self.number(data, "ets_j", where)
        low, high = self.number(data, "ets_low_j", where, optional=True), self.number(data, "ets_high_j", where, optional=True)
        if (low is None) != (high is None) or (low is not None and not low <= ets_j <= high):  # type: ignore[operator]
            raise self.fail(where, f"ets_low_j <= ets_j <= ets_high_j must hold (or both bounds be absent), "
                                   f"got {low!r} <= {ets_j!r} <= {high!r}")
        return Repetition(
            ets_j=ets_j,
            time_s=self.number(data, "time_s", where),
            mean_power_w=nan_if_none(self.number(data, "mean_power_w", where, optional=True)),
            peak_power_w=nan_if_none(self.number(data, "peak_power_w", where, optional=True)),
            calls=calls,
            ets_low_j=low,
            ets_high_j=high,
            phases=self.phases(data, where),
            op_classes=self.phases(data, where, "op_classes"),
        )

    def phases(self, data: dict, where: str, key: str = "phases") -> dict[str, PhaseFigures] | None:
        """A repetition's ``phases`` (absent: the region had no phase marks), or its ``op_classes``
        (absent: measured without ``by_op``, or saved before them): each figure within its bound."""
        found = data.get(key)
        if found is None:
            return None
        if not isinstance(found, dict) or not found:
            raise self.fail(f"{where}.{key}", "must be a non-empty object (or absent)")
        phases = {}
        for name, figure in found.items():
            at = f"{where}.{key}.{name}"
            if not isinstance(figure, dict):
                raise self.fail(at, "must be an object")
            ets_j, low, high, time_s = (self.number(figure, key, at) for key in ("ets_j", "ets_low_j", "ets_high_j", "time_s"))
            if not low <= ets_j <= high:
                raise self.fail(at, f"ets_low_j <= ets_j <= ets_high_j must hold, got {low!r} <= {ets_j!r} <= {high!r}")
            why_not = figure.get("why_not", "")
            if not isinstance(why_not, str):
                raise self.fail(f"{at}.why_not", f"must be a string or absent, got {shown(why_not)}")
            phases[str(name)] = PhaseFigures(
                ets_j=ets_j, ets_low_j=low, ets_high_j=high, time_s=time_s,
                power_w=nan_if_none(self.number(figure, "power_w", at, optional=True)),
                time_share=nan_if_none(self.number(figure, "time_share", at, optional=True)),
                energy_share=nan_if_none(self.number(figure, "energy_share", at, optional=True)),
                distinguishable=self.flag(figure, "distinguishable", at), why_not=why_not)
        return phases

    # -- typed fields ----------------------------------------------------------------------
    def text(self, data: dict, key: str, where: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(_at(where, key), f"must be a non-empty string, got {shown(value)}")
        return value

    def choice(self, data: dict, key: str, where: str, choices: tuple[_C, ...], default: _C | None = None) -> _C:
        """One of ``choices`` (a ``Literal``'s values); ``default`` where the key is absent (older documents)."""
        value = data.get(key, default)
        for choice in choices:
            if value == choice:
                return choice
        raise self.fail(_at(where, key), f"must be one of {', '.join(choices)}, got {shown(value)}")

    def flag(self, data: dict, key: str, where: str) -> bool:
        value = data.get(key)
        if not isinstance(value, bool):
            raise self.fail(_at(where, key), f"must be true or false, got {shown(value)}")
        return value

    @overload
    def number(self, data: dict, key: str, where: str, *, optional: Literal[False] = False) -> float: ...

    @overload
    def number(self, data: dict, key: str, where: str, *, optional: bool) -> float | None: ...

    def number(self, data: dict, key: str, where: str, *, optional: bool = False) -> float | None:
        value = data.get(key)
        if value is None and optional:
            return None
        problem = figure_problem(key, value)    # finite, in range: 1.7e308 J or a negative ETS is damage
        if problem:
            raise self.fail(_at(where, key), problem)
        assert value is not None     # figure_problem refuses a missing figure
        return float(value)

    def mapping(self, data: dict, key: str, where: str) -> dict:
        value = data.get(key)
        if not isinstance(value, dict):
            raise self.fail(_at(where, key), "must be an object")
        return value

    def items(self, data: dict, key: str, where: str, *, optional: bool = False) -> list:
        value = data.get(key)
        if value is None and optional:
            return []
        if not isinstance(value, list):
            raise self.fail(_at(where, key), "must be a list")
        return value


def _with_slots(entries: list[CaseEntry], raw: list) -> tuple[CaseEntry, ...]:
    """Documents written before ``gpu_slot`` existed: a case's GPUs get their places in file order."""
    if all(isinstance(item, dict) and "gpu_slot" in item for item in raw):
        return tuple(entries)
    seen: dict[tuple[str, str], int] = {}
    placed = []
    for entry in entries:
        slot = seen.get((entry.case_id, entry.cap), 0)
        seen[(entry.case_id, entry.cap)] = slot + 1
        placed.append(replace(entry, gpu_slot=slot))
    return tuple(placed)


def _at(where: str, key: str) -> str:
    return key if where == key else f"{where}.{key}"


