"""One simulated GPU's power over time, as this process's work drives it.

The timeline holds the power above idle as segments of constant power, in time order, possibly
reaching into the future: work is queued when it is launched and runs after what is queued
before it, as on a real GPU. Two kinds of work fill it:

* **declared work** (:meth:`Timeline.queue`): a step of known duration and power, from the
  roofline model; it starts when the GPU is free;
* **the CPU-time proxy** (:meth:`Timeline.flow`), for work nobody declared: the CPU time the
  process used between two calls is taken as GPU work launched evenly over that interval (a fluid
  model): the GPU is busy for its share of the interval, and what does not fit runs after it.

The energy above idle up to any moment is the integral of the segments (:meth:`Timeline.dynamic_mj_at`).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, replace

HISTORY_S = 60.0       # segments kept: the exact integral of recent regions, windowed power averages


@dataclass(frozen=True)
class Segment:
    """[start, end] at ``dynamic_w`` above idle; ``before_mj``: the energy above idle before it."""

    start: float
    end: float
    dynamic_w: float
    before_mj: float


def _start_of(segment: Segment) -> float:
    return segment.start


class Timeline:
    """The dynamic power of one GPU in one process; times are on the simulator's clock."""

    def __init__(self, now: float) -> None:
        self.segments: deque[Segment] = deque()
        self.end = now                 # the end of the last segment: the GPU is free from here on
        self.total_mj = 0.0            # energy above idle of all segments, up to ``end``
        self.busy_s = 0.0              # the length of all segments: the time the GPU is (or was) busy

    def busy_at(self, moment: float) -> bool:
        return self.end > moment

    def queue(self, now: float, duration_s: float, dynamic_w: float) -> float:
        """Declared work of ``duration_s`` at ``dynamic_w``, from when the GPU is free; returns its end."""
        start = max(now, self.end)
        self._add(start, start + duration_s, dynamic_w)
        return start + duration_s

    def flow(self, since: float, now: float, device_s: float, busy_w: float) -> None:
        """CPU-proxy work: ``device_s`` of work at ``busy_w``, launched evenly over [since, now]."""
        if device_s <= 0:
            return
        start = max(since, self.end)
        if start >= now:     # no time to spread it over (a virtual clock), or the GPU is busy past now
            self._add(start, start + device_s, busy_w)
            return
        share = min(1.0, device_s / (now - start))
        self._add(start, now, busy_w * share)
        leftover = device_s - share * (now - start)
        if leftover > 1e-12:
            self._add(now, now + leftover, busy_w)

    def dynamic_mj_at(self, moment: float) -> float:
        """The energy above idle up to ``moment`` (recent past, or queued future)."""
        segments = self.segments
        if not segments or moment >= segments[-1].end:
            return self.total_mj
        if moment <= segments[0].start:
            return segments[0].before_mj
        segment = segments[bisect.bisect_right(segments, moment, key=_start_of) - 1]
        return segment.before_mj + segment.dynamic_w * (min(moment, segment.end) - segment.start) * 1000.0

    def trim(self, now: float) -> None:
        while self.segments and self.segments[0].end < now - HISTORY_S:
            self.segments.popleft()

    def _add(self, start: float, end: float, dynamic_w: float) -> None:
        if end <= start:
            return
        last = self.segments[-1] if self.segments else None
        if last is not None and last.dynamic_w == dynamic_w and last.end == start:
            self.segments[-1] = replace(last, end=end)
        else:
            self.segments.append(Segment(start, end, dynamic_w, self.total_mj))
        self.total_mj += dynamic_w * (end - start) * 1000.0
        self.busy_s += end - start
        self.end = max(self.end, end)
