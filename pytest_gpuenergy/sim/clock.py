"""The simulated GPUs' time: virtual (the default) or the host's wall clock.

On a **virtual clock** time moves only when the simulated GPU's work moves it (a synchronisation
waits for the queued work to finish), or when something waits on it (the meter waiting for the
counter's next publication). Nothing the host does (its load, its speed, pytest's own work between
tests) shows in it, so declared work gives the same figures on any machine, to the last digit.
Whatever wants to act at given moments (the meter's recorders, which read the energy counter
around its publications) hands the clock a *plan*: a generator that acts and then yields the
moment it wants to act next. The clock wakes each plan at exactly those moments as it moves.

On the **wall clock** (``GPUENERGY_SIM_CLOCK=wall``) the simulated GPU runs in real time, as it
did before declared work: waiting sleeps, plans run in threads, and the figures vary with the host.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .. import realtime

CLOCK_ENV = "GPUENERGY_SIM_CLOCK"
CLOCKS = ("virtual", "wall")
_MAX_PLAN_STEPS = 10_000_000     # a plan that never moves forward must not hang the process


class WallClock:
    """Real time: the host's clock, and sleeping."""

    virtual = False

    def now(self) -> float:
        return realtime.wall_time()

    def sleep_until(self, moment: float) -> None:
        delay = moment - self.now()
        if delay > 0:
            realtime.sleep(delay)


@dataclass
class Plan:
    """A generator of wake-up moments the virtual clock runs; stopped when it ends or fails."""

    steps: Iterator[float]
    on_error: Callable[[BaseException], None]
    wake_at: float = 0.0
    alive: bool = True
    order: int = field(default=0)

    def stop(self) -> None:
        self.alive = False


class VirtualClock:
    """Simulated time that moves only when advanced, waking plans at the moments they asked for."""

    virtual = True

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._plans: list[tuple[float, int, Plan]] = []
        self._order = itertools.count()
        self._advancing = False

    def now(self) -> float:
        return self._now

    def sleep_until(self, moment: float) -> None:
        self.advance_to(moment)

    def restart(self, at: float) -> None:
        """Start time over at ``at`` with no plan (each test of a session starts at the same moment:
        see ``SimulatedNvml.simBeginTest``). Plans still running are stopped."""
        for _, _, plan in self._plans:
            plan.stop()
        self._plans.clear()
        self._now = at

    def start(self, steps: Iterator[float], on_error: Callable[[BaseException], None]) -> Plan:
        """Run ``steps`` up to its first wake-up now, then at each moment it yields."""
        plan = Plan(steps, on_error, order=next(self._order))
        self._step(plan)
        return plan

    def advance_to(self, moment: float) -> None:
        """Move time forward to ``moment`` (never back), waking every plan due on the way, in order."""
        if self._advancing:     # a plan's own step cannot move time: it only yields
            return
        self._advancing = True
        try:
            for _ in range(_MAX_PLAN_STEPS):
                if not self._plans or self._plans[0][0] > moment:
                    break
                wake_at, _, plan = heapq.heappop(self._plans)
                if plan.alive:
                    self._now = max(self._now, wake_at)
                    self._step(plan)
            self._now = max(self._now, moment)
        finally:
            self._advancing = False

    def _step(self, plan: Plan) -> None:
        try:
            wake_at = next(plan.steps)
        except StopIteration:
            plan.alive = False
            return
        except BaseException as exc:    # handed to whoever watches the plan
            plan.alive = False
            plan.on_error(exc)
            return
        plan.wake_at = max(wake_at, self._now)
        heapq.heappush(self._plans, (plan.wake_at, plan.order, plan))


def clock_from_env(text: str | None) -> str:
    """``virtual`` (default) or ``wall``; anything else is an error naming the choices."""
    value = (text or "virtual").strip().lower() or "virtual"
    if value not in CLOCKS:
        raise ValueError(f"{CLOCK_ENV}={text!r}: choose virtual (the default: figures repeat on any host) or wall")
    return value
