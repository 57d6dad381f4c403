"""One knob protocol, one mechanism: how a setting on a GPU is changed so that it always comes back.

A knob is one setting of one device that survives the process that changed it: the power limit
(``capping.py``) and the SM clock lock (``clocks.py``) are the two. Each says only what is its own
(the ``Knob`` protocol): how to read the setting, put one, check that one may be put back, and
write it for messages and the journal. Everything else is the same for both and lives here and in
``journal.py``, once:

1. ``Setter.changing`` holds the devices' cross-process locks (``locks.py``) while a setting is
   applied, and puts back what was changed if applying fails;
2. ``Setter.journaled`` writes the journal entry (the saved setting) *before* the device changes;
   an entry someone left (a killed run) keeps its saved setting, which is never taken from the
   device's changed state;
3. ``Setter.restore`` puts the saved setting back exactly, retried, with SIGINT/SIGTERM/SIGHUP held
   until it is done (``signals.py``), reads it back where the device can, and only then clears the
   entry; a device that stays changed keeps its entry and is named in the error;
4. ``Journal.repair`` (``journal.py``) restores what a dead session left, at the start and the end
   of a session and in ``gpuenergy restore``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .. import realtime
from ..errors import DeviceError, GpuLostError, LimitChangeError, LimitRestoreError
from .device import RETRY_ATTEMPTS, Gpu
from .locks import holding, lock_paths
from .signals import signals_held

if TYPE_CHECKING:
    from .journal import Journal, JournalEntry

S = TypeVar("S")


class Unreadable(enum.Enum):
    """A setting the device cannot report (real NVML cannot read an SM clock lock back)."""

    UNREADABLE = "unreadable"


UNREADABLE = Unreadable.UNREADABLE


class Knob(Protocol[S]):
    """A setting ``S`` on one device: what the mechanism needs of it, and nothing more."""

    @property
    def name(self) -> str:
        """``power-limit``, ``sm-clock``: names the knob in journal entries."""

    @property
    def what(self) -> str:
        """``power limit``, ``SM clock``: what messages call it ("restoring the power limit of GPU 0")."""

    def read(self, gpu: Gpu) -> S | Unreadable:
        """The setting the device has now."""

    def put(self, gpu: Gpu, setting: S) -> None:
        """Give the device exactly ``setting`` (a restore, a repair)."""

    def refusal(self, gpu: Gpu, setting: S) -> str | None:
        """Why ``setting`` must not be put back on ``gpu`` (outside its range), or None."""

    def text(self, setting: S) -> str:
        """``250 W``, ``210-990 MHz``, ``not locked``."""

    def describe(self, entry: JournalEntry[S]) -> str:
        """An entry as ``gpuenergy info`` and a repair name it: the device, its setting, the saved one, the owner."""

    def left_text(self, entry: JournalEntry[S]) -> str:
        """The setting an entry stands for and the saved one (what a stopped restore leaves)."""

    def driver_command(self, gpu_uuid: str, vendor: str, setting: S) -> str:
        """The vendor's own command that puts ``setting`` back, without pytest-gpuenergy."""

    def encode(self, setting: S) -> Any:
        """``setting`` as JSON, for the journal."""

    def decode(self, value: Any, field: str) -> S:
        """A journal's JSON back into a setting; ``ValueError`` naming ``field`` where it is damaged."""


@dataclass
class _Changed(Generic[S]):
    gpu: Gpu
    entry: JournalEntry[S]      # holds the saved setting that must come back


class Setter(Generic[S]):
    """Changes one knob on a set of GPUs and guarantees their saved settings come back.

    Use as a context manager, or ``apply`` then ``restore`` in a ``finally``. A knob's own class
    (``PowerCapper``, ``ClockCapper``) adds ``apply`` and ``current``, built on ``changing`` and
    ``journaled``.
    """

    def __init__(self, knob: Knob[S], gpus: Sequence[Gpu], journal: Journal[S], lock_folder: Path) -> None:
        self.knob = knob
        self.gpus = list(gpus)
        self.journal = journal
        self.lock_folder = lock_folder
        self._changed: list[_Changed[S]] = []
        self._locks = ExitStack()
        # What the user should know but that is no error (a GPU enforcing another limit than asked, a
        # setting taken over from a dead run): said at the end of the session, never as a warning that
        # a suite's ``filterwarnings = error`` would turn into a failure in the middle of a change.
        self.notices: list[str] = []

    def __enter__(self) -> Setter[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    @property
    def pending(self) -> list[Gpu]:
        """GPUs still at a changed setting."""
        return [changed.gpu for changed in self._changed]

    @contextmanager
    def changing(self, already: str) -> Iterator[None]:
        """Hold the GPUs' locks while a setting is applied; put back what was changed if it fails.
        ``already``: the refusal of a second change before a restore."""
        if self._changed:
            raise LimitChangeError(already)
        self._locks.enter_context(holding(lock_paths(self.lock_folder, [g.uuid for g in self.gpus])))
        try:
            yield
        except BaseException as exc:
            restore_after_failure(self, exc)
            raise

    def journaled(self, gpu: Gpu, saved: S, applied: S) -> JournalEntry[S]:
        """Journal ``applied`` with the setting to bring back (an entry already there keeps its own)
        before the caller changes the GPU; from now on ``restore`` puts the saved setting back."""
        entry = self.journal.record(gpu, saved, applied)
        self._changed.append(_Changed(gpu, entry))
        return entry

    def restore(self) -> None:
        """Put every changed GPU back to its exact saved setting; raise if any stays changed.

        Retried with a growing pause; SIGINT, SIGTERM and SIGHUP wait until it is done. A GPU that
        cannot be restored keeps its journal entry (so ``gpuenergy restore``, or the end of the
        session, can finish the job) and is named in the error.
        """
        failures: list[str] = []
        try:
            if self._changed:
                labels = ", ".join(c.gpu.label for c in self._changed)
                with signals_held(f"restoring the {self.knob.what} of {labels}"):
                    while self._changed:
                        changed = self._changed.pop()
                        problem = put_back(self.knob, changed.gpu, changed.entry.saved)
                        if problem is None:
                            self.journal.clear(changed.entry)
                        else:
                            failures.append(problem)
        finally:
            self._locks.close()
        if failures:
            raise LimitRestoreError("; ".join(failures))


def restore_after_failure(setter: Setter[Any], failure: BaseException) -> None:
    """Put back what a failed ``apply`` changed. Should that fail too, the error says both, the cause
    first: "no permission to set" reads as such, not as a failed restore."""
    try:
        setter.restore()
    except LimitRestoreError as also:
        if not isinstance(failure, Exception):
            raise
        raise LimitRestoreError(f"{failure}; putting the GPU back failed too: {also}") from None


def put_back(knob: Knob[S], gpu: Gpu, saved: S) -> str | None:
    """Put ``saved`` back on ``gpu``, retried; None once it reads back (or cannot be read), else why not."""
    last_problem = ""
    for attempt in range(RETRY_ATTEMPTS):
        if attempt:
            realtime.sleep(gpu.retry_backoff_s * attempt)
        try:
            if knob.read(gpu) == saved:          # nothing to put back (someone did, or it never took)
                return None
            knob.put(gpu, saved)
            now = knob.read(gpu)
            if now is UNREADABLE or now == saved:
                return None
            last_problem = f"it reads {knob.text(now)} after the restore"
        except GpuLostError:
            return f"{gpu.label} is lost: its {knob.what} could not be set back to {knob.text(saved)}"
        except DeviceError as exc:
            last_problem = str(exc)
    return (f"the {knob.what} of {gpu.label} could not be set back to {knob.text(saved)} after {RETRY_ATTEMPTS} "
            f"attempts ({last_problem})")
