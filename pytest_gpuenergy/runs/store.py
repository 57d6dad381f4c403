"""The storage folder: ``<storage>/<backend>/<gpu-model-slug>/<run_id>.json``, written atomically,
never overwritten; documents built from a session; the runs of a model, newest last."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import StorageError, UnsafeStateFile
from ..fileio import atomic_write_json
from ..meter.results import EnergyResult
from . import DEFAULT_STORAGE, LATEST, PASSED, Outcome
from .reader import load_document
from .records import CaseEntry, RunDocument, as_utc, require_json

_MAX_SLUG = 80
_SAFE_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


# -- building documents from a session --------------------------------------------------------------

def build_documents(
    cases: Sequence[tuple[str, EnergyResult]],
    *,
    machine: dict[str, Any],
    options: dict[str, Any],
    commit: dict[str, Any] | None,
    created_at: datetime | None = None,
    outcomes: Mapping[str, Outcome] | None = None,
) -> list[RunDocument]:
    """The session's results as one document per (backend, GPU model), in first-seen order.

    ``outcomes`` says how each case's test ended (by case id; a case not named passed).

    A baseline is only meaningful for one GPU model, so a session on an H100 and an A100 gives
    two documents, each compared with its own model's history.
    """
    require_json("machine", machine)
    require_json("options", options)
    if commit is not None:
        require_json("commit", commit)
    when = as_utc(created_at or datetime.now(timezone.utc))
    groups: dict[tuple[str, str], list[CaseEntry]] = {}
    for case_id, result in cases:
        if not isinstance(case_id, str) or not case_id:
            raise ValueError(f"build_documents: case id {case_id!r} must be a non-empty string (a pytest node id)")
        for gpu in result.per_gpu:
            if not gpu.repetitions:
                raise ValueError(f"build_documents: case {case_id!r} has no repetition on GPU {gpu.gpu_index}")
        for entry in CaseEntry.entries_of(case_id, result, (outcomes or {}).get(case_id, PASSED)):
            groups.setdefault((entry.backend, entry.gpu_name), []).append(entry)
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
    return f"{as_utc(created_at):%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


def _machine_for_model(machine: dict[str, Any], model: str) -> dict[str, Any]:
    """The machine description with only this model's GPUs listed (when the list says names)."""
    result = dict(machine)
    gpus = machine.get("gpus")
    if isinstance(gpus, list):
        mine = [g for g in gpus if isinstance(g, dict) and g.get("name") == model]
        result["gpus"] = mine or list(gpus)
    return result


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

    def save(self, doc: RunDocument, *, overwrite: bool = False,
             update: Callable[[dict[str, Any]], None] | None = None) -> Path:
        """Write ``doc`` atomically; an existing file is kept unless ``overwrite`` is asked for.
        ``update`` may change the document's JSON first (the teams' hook); the result must still be a
        valid document, or nothing is written. The folders on the way are checked and written in one
        step, through the descriptor of the last one (``fileio.atomic_write_text``): a folder another
        user could change, or a link swapped in after ``path_for`` looked, is refused, not followed."""
        path = self.path_for(doc)
        data = doc.to_json()
        if update is not None:
            update(data)
            try:
                RunDocument.from_json(json.loads(json.dumps(data, allow_nan=False)), "the run document as pytest_gpuenergy_update_run left it")
            except (TypeError, ValueError) as exc:
                raise StorageError(f"the run document as pytest_gpuenergy_update_run left it is not JSON: {exc}") from None
        try:
            atomic_write_json(path, data, overwrite=overwrite)
        except FileExistsError:
            raise StorageError(
                f"{path} already exists: run {doc.run_id} was saved before; nothing was overwritten "
                f"(run ids are unique, so save a new run instead of this one)"
            ) from None
        except UnsafeStateFile as exc:
            raise StorageError(f"cannot save run {doc.run_id}: {exc}") from None
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




# -- where a project keeps its runs ------------------------------------------------------------------

# pytest's configuration files, each with the section that makes it one (None: the file alone does)
_CONFIG_FILES = (("pytest.toml", None), (".pytest.toml", None), ("pytest.ini", None), (".pytest.ini", None),
                 ("pyproject.toml", "[tool.pytest"), ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))
_STORAGE_SETTING = re.compile(r"""^\s*energy_storage\s*=\s*["']?([^"'#\n]+?)["']?\s*(?:#.*)?$""", re.MULTILINE)


def project_storage(start: Path | None = None) -> Path:
    """The storage folder a pytest session started here would use, for commands run anywhere in the
    project (``gpuenergy runs`` from a subfolder): in the nearest folder up from ``start`` that holds
    the default storage folder or a pytest configuration file (the rootdir), the configuration's
    ``energy_storage`` if it sets one, else ``.energy``. ``start``'s own ``.energy`` when none is found."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / DEFAULT_STORAGE).is_dir():
            return folder / DEFAULT_STORAGE
        for name, section in _CONFIG_FILES:
            try:
                text = (folder / name).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if section is None or section in text:
                setting = _STORAGE_SETTING.search(text)
                storage = Path(setting.group(1).strip()) if setting else Path(DEFAULT_STORAGE)
                return storage if storage.is_absolute() else folder / storage
    return here / DEFAULT_STORAGE
