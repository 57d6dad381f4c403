"""Run documents: a session's results as versioned JSON files, kept per backend and GPU model.

A team commits the storage folder (``.energy/`` by default) to its repository; the newest
document for a GPU model is the baseline the next run is compared with. Baselines outlive the
job that wrote them, so every write is atomic (``fileio.atomic_write_json``), nothing is
overwritten unless asked, and a file this module cannot read is reported by name and left
exactly as it is: a corrupt baseline must be looked at by a person, not silently replaced.

Layout::

    <storage>/<backend>/<gpu-model-slug>/<run_id>.json

``backend`` is ``nvml`` or ``sim``; the slug is the GPU model name in lower-case ASCII with
dashes (``nvidia-h100-80gb-hbm3``). A session that measured two GPU models writes two documents.

Format (``"format": "pytest-gpuenergy-run"``, ``"version": 2``; the full description with an
example is ``docs/run-format.md``)::

    {
      "format": "pytest-gpuenergy-run",   # any other value: not ours, refused
      "version": 2,                       # integer; a newer one is refused (upgrade the plugin); 1 is read
      "run_id": "20250301T101500Z-1a2b3c4d",   # UTC time of the run + random; unique
      "created_at": "2025-03-01T10:15:00+00:00",
      "backend": "nvml" | "sim",
      "simulated": false,                 # true: figures come from the GPU simulator
      "gpu_model": "NVIDIA H100 80GB HBM3",
      "machine": {"host", "platform", "python", "backend", "simulated", "driver",
                  "cuda_driver", "cuda", "torch", "pytest_gpuenergy",
                  "gpus": [{"index", "name", "uuid", "default_limit_w", "min_limit_w",
                            "max_limit_w"}]},
      "commit": {"id", "branch", "dirty"} | null,
      "options": {...},                   # the session's options (caps, repeat, ...)
      "cases": [{
          "case_id": "tests/test_x.py::test_train[150W]#2",   # "#n": n-th measured region
          "test": "tests/test_x.py::test_train[150W]",
          "cap": "150W",  "gpu_index": 0, "gpu_name": ..., "gpu_uuid": ...,
          "backend": "nvml", "simulated": false,
          "method": "counter" | "sampling", "power_source": null | "instant" | "usage",
          "limit_requested_w": 150.0 | null, "limit_enforced_w": 150.0, "default_limit_w": 700.0,
          "repetitions": [{"ets_j", "time_s", "edp_js", "mean_power_w", "peak_power_w",
                           "calls", "ets_low_j", "ets_high_j"}],   # per call; the bound holds the true ETS
                                                                    # (absent in version 1)
          "summary": {"n", "ets_j", "time_s", "edp_js", "mean_power_w", "peak_power_w",
                      "ets_std_j", "ets_cv", "ets_min_j", "ets_max_j"},
          "notes": ["..."]
      }]
    }

Units are in the names (J, s, J s, W). Numbers that are undefined (a mean power over a zero
duration) are written as ``null``. ``summary`` is written for readers of the file; on loading
it is recomputed from ``repetitions``, which are the data.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import platform
import re
import secrets
import socket
import subprocess
import sys
import unicodedata
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import JsonInputError, StorageError
from ..fileio import atomic_write_json
from ..meter.results import EnergyResult, GpuResult, Repetition, Summary
from .validation import figure_problem, parse_json, shown

FORMAT = "pytest-gpuenergy-run"
VERSION = 2   # 2: repetitions carry the bound of their ETS (ets_low_j, ets_high_j); 1 is still read
DEFAULT_STORAGE = ".energy"
LATEST = "latest"

_MAX_SLUG = 80
_SAFE_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_REGION_SUFFIX = re.compile(r"(.+)#(\d+)")
_GIT_TIMEOUT_S = 5.0


# -- records -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CaseEntry:
    """One GPU's figures for one case (one measured region of one test at one cap)."""

    case_id: str
    test: str
    cap: str
    gpu_index: int
    gpu_name: str
    gpu_uuid: str
    backend: str
    simulated: bool
    method: str
    power_source: str | None
    limit_requested_w: float | None
    limit_enforced_w: float
    default_limit_w: float
    repetitions: tuple[Repetition, ...]
    notes: tuple[str, ...] = ()
    clock_cap: str | None = None             # the SM clock cap's label; absent from a document without one
    sm_clock_cap_mhz: float | None = None    # the locked SM clock's upper end
    gpu_slot: int = 0              # the GPU's place among the case's GPUs (0 for a one-GPU test; a rank's order)
    host: str | None = None        # torch.distributed: the host and global rank that measured this GPU
    rank: int | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        """What identifies the case across runs: case id, cap label, and the GPU's place in the case.

        Not the GPU's index: a pytest-xdist worker takes whichever GPU is its own, so one test runs
        on GPU 3 today and GPU 0 tomorrow, and ranks on two hosts both have a GPU 0.
        """
        return (self.case_id, self.cap, self.gpu_slot)

    @property
    def summary(self) -> Summary:
        return Summary.of(self.repetitions)

    def samples(self, field_name: str) -> list[float]:
        """Per-repetition values of ``ets_j``, ``time_s`` or ``edp_js``."""
        return [float(getattr(rep, field_name)) for rep in self.repetitions]

    @classmethod
    def from_gpu_result(cls, case_id: str, gpu: GpuResult, slot: int = 0) -> "CaseEntry":
        return cls(
            case_id=case_id,
            test=node_id_of(case_id),
            cap=gpu.cap_label,
            gpu_index=gpu.gpu_index,
            gpu_name=gpu.gpu_name,
            gpu_uuid=gpu.gpu_uuid,
            backend=gpu.backend,
            simulated=gpu.simulated,
            method=gpu.method,
            power_source=gpu.power_source,
            limit_requested_w=gpu.limit_requested_w,
            limit_enforced_w=gpu.limit_enforced_w,
            default_limit_w=gpu.default_limit_w,
            repetitions=tuple(gpu.repetitions),
            notes=tuple(gpu.notes),
            clock_cap=gpu.clock_label,
            sm_clock_cap_mhz=gpu.sm_clock_cap_mhz,
            gpu_slot=slot,
            host=gpu.host,
            rank=gpu.rank,
        )

    def to_gpu_result(self) -> GpuResult:
        return GpuResult(
            gpu_index=self.gpu_index, gpu_name=self.gpu_name, gpu_uuid=self.gpu_uuid, backend=self.backend,
            simulated=self.simulated, method=self.method, power_source=self.power_source, cap_label=self.cap,
            limit_requested_w=self.limit_requested_w, limit_enforced_w=self.limit_enforced_w,
            default_limit_w=self.default_limit_w, repetitions=self.repetitions, notes=self.notes,
            clock_label=self.clock_cap, sm_clock_cap_mhz=self.sm_clock_cap_mhz,
            host=self.host, rank=self.rank,
        )

    @classmethod
    def from_json(cls, data: Any, source: str) -> "CaseEntry":
        """Check and read one case as written by ``to_json`` (``source`` is named in errors)."""
        return _DocumentReader(source).case(data, "case")

    def to_json(self) -> dict[str, Any]:
        clock = {} if self.clock_cap is None else {"clock_cap": self.clock_cap,
                                                   "sm_clock_cap_mhz": _finite(self.sm_clock_cap_mhz)}
        return {
            "case_id": self.case_id,
            "test": self.test,
            "cap": self.cap,
            "gpu_index": self.gpu_index,
            "gpu_name": self.gpu_name,
            "gpu_uuid": self.gpu_uuid,
            "backend": self.backend,
            "simulated": self.simulated,
            "method": self.method,
            "power_source": self.power_source,
            "limit_requested_w": _finite(self.limit_requested_w),
            "limit_enforced_w": _finite(self.limit_enforced_w),
            "default_limit_w": _finite(self.default_limit_w),
            "repetitions": [_repetition_json(rep) for rep in self.repetitions],
            "summary": {k: _finite(v) for k, v in asdict(self.summary).items()},
            "notes": list(self.notes),
            **clock,
            "gpu_slot": self.gpu_slot,
            "host": self.host,
            "rank": self.rank,
        }


@dataclass(frozen=True)
class RunDocument:
    """One session's results on one GPU model and backend, as saved and loaded."""

    run_id: str
    created_at: datetime
    backend: str
    simulated: bool
    gpu_model: str
    machine: dict[str, Any]
    commit: dict[str, Any] | None
    options: dict[str, Any]
    cases: tuple[CaseEntry, ...]
    path: Path | None = field(default=None, compare=False)   # where it was loaded from or saved to
    sources: tuple[str, ...] = field(default=(), compare=False)  # runs merged into this one (``shards.merge_runs``)

    @property
    def origin(self) -> str:
        return "simulated" if self.simulated else "measured"

    def describe(self) -> str:
        """One line for listings: id, date, backend, model, cases, commit."""
        return (
            f"{self.run_id}  {self.created_at:%Y-%m-%d %H:%M} UTC  {model_label(self.gpu_model, self.backend, self.simulated)}  "
            f"{len(self.cases)} cases  {commit_text(self.commit)}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "run_id": self.run_id,
            "created_at": self.created_at.isoformat(),
            "backend": self.backend,
            "simulated": self.simulated,
            "gpu_model": self.gpu_model,
            "machine": self.machine,
            "commit": self.commit,
            "options": self.options,
            "cases": [case.to_json() for case in self.cases],
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "run document") -> "RunDocument":
        """Check and read a parsed document; ``source`` (the file) is named in every error."""
        return _DocumentReader(source).document(data)


def commit_text(commit: dict[str, Any] | None) -> str:
    """``abc1234 (main, dirty)`` or ``no commit``: how a run's commit reads in listings."""
    if not commit or not commit.get("id"):
        return "no commit"
    parts = [p for p in (commit.get("branch"), "dirty" if commit.get("dirty") else None) if p]
    return str(commit["id"])[:10] + (f" ({', '.join(parts)})" if parts else "")


def with_origin(name: str, simulated: bool) -> str:
    """A GPU model name that says it is simulated (the simulator's names already do)."""
    return f"{name} (simulated)" if simulated and "simulated" not in name.lower() else name


def model_label(gpu_model: str, backend: str, simulated: bool) -> str:
    """``NVIDIA H100 80GB HBM3 [nvml]`` / ``... (simulated) [sim]``: a run's model in titles."""
    return f"{with_origin(gpu_model, simulated)} [{backend}]"


def node_id_of(case_id: str) -> str:
    """The test's node id: the case id without the ``#n`` of a test's n-th measured region."""
    match = _REGION_SUFFIX.fullmatch(case_id)
    if match and int(match.group(2)) >= 2:
        return match.group(1)
    return case_id


# -- building documents from a session --------------------------------------------------------------

def build_documents(
    cases: Sequence[tuple[str, EnergyResult]],
    *,
    machine: dict[str, Any],
    options: dict[str, Any],
    commit: dict[str, Any] | None,
    created_at: datetime | None = None,
) -> list[RunDocument]:
    """The session's results as one document per (backend, GPU model), in first-seen order.

    A baseline is only meaningful for one GPU model, so a session on an H100 and an A100 gives
    two documents, each compared with its own model's history.
    """
    _require_json("machine", machine)
    _require_json("options", options)
    if commit is not None:
        _require_json("commit", commit)
    when = _utc(created_at or datetime.now(timezone.utc))
    groups: dict[tuple[str, str], list[CaseEntry]] = {}
    for case_id, result in cases:
        if not isinstance(case_id, str) or not case_id:
            raise ValueError(f"build_documents: case id {case_id!r} must be a non-empty string (a pytest node id)")
        for slot, gpu in enumerate(result.per_gpu):
            if not gpu.repetitions:
                raise ValueError(f"build_documents: case {case_id!r} has no repetition on GPU {gpu.gpu_index}")
            groups.setdefault((gpu.backend, gpu.gpu_name), []).append(CaseEntry.from_gpu_result(case_id, gpu, slot))
    documents = []
    for (backend, model), entries in groups.items():
        documents.append(RunDocument(
            run_id=new_run_id(when),
            created_at=when,
            backend=backend,
            simulated=any(e.simulated for e in entries),
            gpu_model=model,
            machine=_machine_for_model(machine, model),
            commit=dict(commit) if commit is not None else None,
            options=dict(options),
            cases=tuple(entries),
        ))
    return documents


def new_run_id(created_at: datetime) -> str:
    """UTC time to the second plus 32 random bits: sorts by time, unique without coordination."""
    return f"{_utc(created_at):%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


def _machine_for_model(machine: dict[str, Any], model: str) -> dict[str, Any]:
    """The machine description with only this model's GPUs listed (when the list says names)."""
    result = dict(machine)
    gpus = machine.get("gpus")
    if isinstance(gpus, list):
        mine = [g for g in gpus if isinstance(g, dict) and g.get("name") == model]
        result["gpus"] = mine or list(gpus)
    return result


def collect_machine_info(backend: Any, gpus: Iterable[Any]) -> dict[str, Any]:
    """What a result depends on besides the code: host, driver, CUDA, torch, the GPUs' limits.

    torch is never imported here (it takes seconds); its version comes from the installed
    distribution, and the CUDA version it was built with only when the tests imported it.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "backend": getattr(backend, "name", None),
        "simulated": bool(getattr(backend, "simulated", False)),
        "driver": getattr(backend, "driver_version", None),
        "cuda_driver": _cuda_driver_version(backend),
        "cuda": cuda,
        "torch": _distribution_version("torch"),
        "pytest_gpuenergy": _distribution_version("pytest-gpuenergy"),
        "gpus": [_gpu_info(gpu) for gpu in gpus],
    }
    return info


def _gpu_info(gpu: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid}
    try:
        limits = gpu.limits()
    except Exception:  # a GPU that cannot report limits still belongs in the description
        return entry
    entry.update(
        default_limit_w=limits.default_mw / 1000,
        min_limit_w=limits.min_mw / 1000,
        max_limit_w=limits.max_mw / 1000,
    )
    return entry


def _cuda_driver_version(backend: Any) -> str | None:
    """The CUDA version the driver supports, as ``12.4``, where the NVML library tells it."""
    nvml = getattr(backend, "nvml", None)
    getter = getattr(nvml, "nvmlSystemGetCudaDriverVersion", None)
    if getter is None:
        return None
    try:
        version = int(getter())
    except Exception:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_commit_info(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The git commit the run measured (id, branch, dirty), or None; never raises.

    On a detached checkout (CI) the branch comes from ``GITHUB_HEAD_REF``/``GITHUB_REF_NAME``
    or ``CI_COMMIT_REF_NAME`` when set. ``dirty`` ignores untracked files: the run document
    about to be written is one.
    """
    commit_id = _git(path, "rev-parse", "HEAD")
    if not commit_id:
        return None
    branch = _git(path, "rev-parse", "--abbrev-ref", "HEAD")
    if branch in (None, "HEAD"):
        branch = next((os.environ[v] for v in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME")
                       if os.environ.get(v)), None)
    status = _git(path, "status", "--porcelain", "--untracked-files=no")
    return {"id": commit_id, "branch": branch, "dirty": None if status is None else bool(status)}


def _git(path: str | os.PathLike[str], *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=path, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


# -- the storage folder ----------------------------------------------------------------------------

class RunStore:
    """The folder of saved runs: ``<folder>/<backend>/<gpu-model-slug>/<run_id>.json``."""

    def __init__(self, folder: str | os.PathLike[str] = DEFAULT_STORAGE) -> None:
        self.folder = Path(folder)

    def path_for(self, doc: RunDocument) -> Path:
        """Where ``doc`` is saved; every part is sanitised, so the path stays inside the folder."""
        path = self.folder / slug(doc.backend) / slug(doc.gpu_model) / f"{file_stem(doc.run_id)}.json"
        root = self.folder.resolve()
        if not path.resolve().is_relative_to(root):   # defence in depth: slugs cannot do this
            raise StorageError(f"run {doc.run_id!r} would be written outside {self.folder}; refusing")
        return path

    def save(self, doc: RunDocument, *, overwrite: bool = False) -> Path:
        """Write ``doc`` atomically; an existing file is kept unless ``overwrite`` is asked for."""
        path = self.path_for(doc)
        try:
            atomic_write_json(path, doc.to_json(), overwrite=overwrite)
        except FileExistsError:
            raise StorageError(
                f"{path} already exists: run {doc.run_id} was saved before; nothing was overwritten "
                f"(run ids are unique, so save a new run instead of this one)"
            ) from None
        except OSError as exc:
            raise StorageError(
                f"cannot write {path}: {exc.strerror or exc}; check that {self.folder} is a writable folder"
            ) from None
        return path

    def load(self, path: str | os.PathLike[str]) -> RunDocument:
        return load_document(path)

    def files(self, backend: str | None = None, gpu_model: str | None = None) -> list[Path]:
        """The document files that may hold runs of ``backend`` and ``gpu_model`` (None: any)."""
        if not self.folder.is_dir():
            return []
        backend_glob = slug(backend) if backend is not None else "*"
        model_glob = slug(gpu_model) if gpu_model is not None else "*"
        return sorted(
            p for p in self.folder.glob(f"{backend_glob}/{model_glob}/*.json")
            if not p.name.startswith(".")   # half-written temporary files of atomic writes
        )

    def scan(self, backend: str | None = None, gpu_model: str | None = None) -> tuple[list[RunDocument], list[StorageError]]:
        """Every readable run (oldest first) and one error per file that is not."""
        docs, problems = [], []
        for path in self.files(backend, gpu_model):
            try:
                doc = load_document(path)
            except StorageError as exc:
                problems.append(exc)
                continue
            if (backend is None or doc.backend == backend) and (gpu_model is None or doc.gpu_model == gpu_model):
                docs.append(doc)
        docs.sort(key=lambda d: (d.created_at, d.run_id))
        return docs, problems

    def runs(self, backend: str | None = None, gpu_model: str | None = None) -> list[RunDocument]:
        """The saved runs, oldest first; a file that cannot be read raises ``StorageError``.

        A bad file is never skipped: it may be the newest baseline, and comparing with an older
        one instead would pass a regression unnoticed.
        """
        docs, problems = self.scan(backend, gpu_model)
        if problems:
            raise problems[0]
        return docs

    def latest(self, backend: str, gpu_model: str) -> RunDocument | None:
        runs = self.runs(backend, gpu_model)
        return runs[-1] if runs else None

    def resolve(self, ref: str, backend: str | None = None, gpu_model: str | None = None) -> RunDocument:
        """A run named by a path, a run id (or a unique prefix of one), or ``latest``."""
        ref = str(ref).strip() if ref is not None else ""
        if not ref:
            raise StorageError("no run named: give a run document's path, a run id (see: gpuenergy runs) or 'latest'")
        if ref == LATEST:
            return self._latest_of(backend, gpu_model)
        if _is_file(ref):
            return load_document(ref)
        found = self._by_id(ref)
        if found is not None:
            return found
        if ref.endswith(".json") or os.sep in ref:
            raise StorageError(f"{ref}: no such run document (not a file); give a path to a saved run or a run id")
        raise StorageError(
            f"no saved run {ref!r} in {self.folder} (and no such file); list the runs with: gpuenergy runs --storage {self.folder}"
        )

    def _latest_of(self, backend: str | None, gpu_model: str | None) -> RunDocument:
        runs = self.runs(backend, gpu_model)
        what = " ".join(filter(None, [gpu_model and f"for {gpu_model}", backend and f"(backend {backend})"]))
        if not runs:
            raise StorageError(
                f"no saved run {what + ' ' if what else ''}in {self.folder}; save one with pytest --energy-save"
            )
        series = sorted({(d.backend, d.gpu_model) for d in runs})
        if len(series) > 1:
            names = "; ".join(f"{m} ({b})" for b, m in series)
            raise StorageError(
                f"'latest' is ambiguous in {self.folder}: it holds runs of {names}; name a run id instead (see: gpuenergy runs)"
            )
        return runs[-1]

    def _by_id(self, ref: str) -> RunDocument | None:
        files = self.files()
        exact = [p for p in files if p.stem == file_stem(ref)]
        matches = exact or [p for p in files if p.stem.startswith(ref)]
        if not matches:
            return None
        if len(matches) > 1:
            names = ", ".join(p.stem for p in matches[:5])
            raise StorageError(f"run id {ref!r} is ambiguous in {self.folder}: it matches {names}; give more of the id")
        return load_document(matches[0])


def _is_file(ref: str) -> bool:
    try:
        return Path(ref).is_file()
    except (OSError, ValueError):   # a name too long, or with a NUL byte, is no file
        return False


def slug(text: str) -> str:
    """A folder name for ``text``: lower-case ASCII letters, digits and single dashes.

    Nothing a GPU model or backend is called (slashes, ``..``, unicode, 300 characters) can
    leave the storage folder or make an unusable name.
    """
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    cleaned = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    cleaned = cleaned[:_MAX_SLUG].rstrip("-")
    return cleaned or "unnamed-" + _short_hash(str(text))


def file_stem(run_id: str) -> str:
    """The file name (without ``.json``) for a run id: the id itself when it is a safe name.

    An unsafe id (from a hand-edited document) becomes its slug plus a hash of the id, so two
    different ids never share a file.
    """
    if _SAFE_RUN_ID.fullmatch(run_id) and ".." not in run_id:
        return run_id
    return f"{slug(run_id)[:60]}-{_short_hash(run_id)}"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]


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


class _DocumentReader:
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
            created_at = _utc(datetime.fromisoformat(created))
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
        if power_source is not None and not isinstance(power_source, str):
            raise self.fail(f"{where}.power_source", "must be a string or null")
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
        return CaseEntry(
            case_id=case_id,
            test=data.get("test") if isinstance(data.get("test"), str) else node_id_of(case_id),
            cap=self.text(data, "cap", where),
            gpu_index=index,
            gpu_name=self.text(data, "gpu_name", where),
            gpu_uuid=self.text(data, "gpu_uuid", where),
            backend=self.text(data, "backend", where),
            simulated=self.flag(data, "simulated", where),
            method=self.text(data, "method", where),
            power_source=power_source,
            limit_requested_w=self.number(data, "limit_requested_w", where, optional=True),
            limit_enforced_w=self.number(data, "limit_enforced_w", where),
            default_limit_w=self.number(data, "default_limit_w", where),
            repetitions=tuple(self.repetition(r, f"{where}.repetitions[{i}]") for i, r in enumerate(reps)),
            notes=tuple(str(n) for n in notes),
            clock_cap=clock_cap,
            sm_clock_cap_mhz=self.number(data, "sm_clock_cap_mhz", where, optional=True),
            gpu_slot=slot, host=host, rank=rank,
        )

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
            mean_power_w=_nan_if_none(self.number(data, "mean_power_w", where, optional=True)),
            peak_power_w=_nan_if_none(self.number(data, "peak_power_w", where, optional=True)),
            calls=calls,
            ets_low_j=low,
            ets_high_j=high,
        )

    # -- typed fields ----------------------------------------------------------------------
    def text(self, data: dict, key: str, where: str) -> str:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(_at(where, key), f"must be a non-empty string, got {shown(value)}")
        return value

    def flag(self, data: dict, key: str, where: str) -> bool:
        value = data.get(key)
        if not isinstance(value, bool):
            raise self.fail(_at(where, key), f"must be true or false, got {shown(value)}")
        return value

    def number(self, data: dict, key: str, where: str, *, optional: bool = False) -> float | None:
        value = data.get(key)
        if value is None and optional:
            return None
        problem = figure_problem(key, value)    # finite, in range: 1.7e308 J or a negative ETS is damage
        if problem:
            raise self.fail(_at(where, key), problem)
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


# -- small helpers ---------------------------------------------------------------------------------

def _repetition_json(rep: Repetition) -> dict[str, Any]:
    return {
        "ets_j": _finite(rep.ets_j),
        "time_s": _finite(rep.time_s),
        "edp_js": _finite(rep.edp_js),
        "mean_power_w": _finite(rep.mean_power_w),
        "peak_power_w": _finite(rep.peak_power_w),
        "calls": rep.calls,
        "ets_low_j": _finite(rep.ets_low_j),
        "ets_high_j": _finite(rep.ets_high_j),
    }


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: an undefined figure is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


def _utc(moment: datetime) -> datetime:
    """Times are kept in UTC; a naive time is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def _require_json(name: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"build_documents: {name} must be a dict, got {type(value).__name__}")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"build_documents: {name} cannot be saved as JSON ({exc}); pass only strings, numbers, "
            f"booleans, None, lists and dicts"
        ) from None
