"""What the plugin knows about one pytest session before and after it opens the GPUs.

Most sessions of an environment the plugin is installed in never use it. So ``pytest_configure``
only parses the options (a bad one is a usage error at once) and keeps them here; the session
itself (``EnergySession``: the backend, the GPUs, the journal, the meter), and everything it
imports, comes when the session asks for the GPUs, a test takes a fixture, or a journal entry
says a GPU was left changed (``start``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from .. import realtime
from ..errors import GpuEnergyError
from ..gate.settings import GateOptions
from .options import SessionOptions

if TYPE_CHECKING:
    from ..gate.budget_file import BudgetFile
    from ..gate.ci import EnergyGate
    from ..gpu.placement import Placement
    from .session import EnergySession

STATE_KEY = pytest.StashKey["PluginState"]()


@dataclass
class PluginState:
    """One session's settings, and its ``EnergySession`` once started."""

    options: SessionOptions
    gate_options: GateOptions
    placement: Placement
    sim_seed: int
    asked: bool                          # the session itself asked for the GPUs (an option, a run to save...)
    worker: bool                         # a pytest-xdist worker (its controller repairs and reports)
    unavailable: str | None = None       # why the GPUs cannot be used (every fixture says it)
    session: EnergySession | None = None
    late: bool = False                   # opened after the collection, not at configure
    budget_file: BudgetFile | None = None    # --energy-budgets, read at configure
    on_result: Callable[[str, Any], None] | None = None   # the teams' hook, given every result
    gpu_order: tuple[str, ...] = ()      # a pytest-xdist worker: the GPUs' order its controller chose
    workers: int = 1                     # the controller of ``-n N``: its workers, one GPU each where free
    # How long tests with an energy budget waited for their verdicts, and how many tests, this process's
    # and, on the controller, its workers' (``add_budget_wait``); when the session began (monotonic).
    budget_wait_s: float = 0.0
    budgeted_tests: int = 0
    began_at: float = field(default_factory=realtime.monotonic)
    _gate: EnergyGate | None = None

    def add_budget_wait(self, seconds: float, tests: int = 1) -> None:
        self.budget_wait_s += seconds
        self.budgeted_tests += tests

    @property
    def started(self) -> bool:
        return self.session is not None and self.session.started

    @property
    def reports(self) -> bool:
        """Whether this process saves, compares and reports (not a worker, torchrun rank 0 only)."""
        return self.placement.reports

    def gate(self) -> EnergyGate:
        from ..gate.ci import EnergyGate

        if self._gate is None:
            self._gate = EnergyGate(self.gate_options)
        return self._gate

    def start(self, *, usage_errors: bool) -> EnergySession | None:
        """Open the GPUs now (once). Asked for by the session itself, a problem is a usage error;
        opened for a test's fixture, it fails the tests that use the fixtures (``unavailable``)."""
        if self.session is not None or self.unavailable is not None:
            return self.session if self.started else None
        from .session import EnergySession

        session = EnergySession(self.options, self.placement, sim_seed=self.sim_seed, gpu_order=self.gpu_order,
                                workers=self.workers)
        try:
            session.start(repair=not self.worker)
        except GpuEnergyError as exc:
            if usage_errors:
                raise pytest.UsageError(str(exc)) from None
            self.unavailable = str(exc)
            return None
        session.budget_file = self.budget_file
        session.on_result = self.on_result
        self.session = session
        if self.reports and self.gate_options.compare and session.backend is not None:
            try:
                self.gate().check_baselines(session.backend.name, sorted({g.name for g in session.gpus}))
            except GpuEnergyError as exc:
                raise pytest.UsageError(f"--energy-compare: {exc}") from None
        return session


def state_of(config: pytest.Config) -> PluginState | None:
    return config.stash.get(STATE_KEY, None)


def session_of(config: pytest.Config) -> EnergySession | None:
    """The session's ``EnergySession`` if the GPUs are open (None in a session that uses none of the plugin)."""
    state = state_of(config)
    return state.session if state is not None else None


def started_session(config: pytest.Config) -> EnergySession | None:
    """The session's ``EnergySession``, opening the GPUs now if they are not open yet (None where
    they cannot be: ``PluginState.unavailable`` says why). For a conftest that needs to know the
    backend during collection (the reference workloads pick their budgets by it)."""
    state = state_of(config)
    return state.start(usage_errors=False) if state is not None else None
