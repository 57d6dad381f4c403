"""A simulated Linux powercap tree: the host's CPU packages and DRAM beside the simulated GPUs.

It answers the paths of a real tree (``intel-rapl:N/name``, ``energy_uj``, ``max_energy_range_uj``,
``intel-rapl:N/intel-rapl:N:0`` named ``dram``) with the text the kernel would give, through the
same :class:`host.powercap.Sysfs` the real files are read through: the reader's parsing, zone
rules and wrap handling are the code the simulator runs.

The host model (plausible, not measured: a two-socket GPU server): each package draws
``package_idle_w`` and ``package_active_w`` more while the host works, each package's DRAM
``dram_idle_w`` and ``dram_active_w`` more (its memory traffic: staging batches, launching). The
host works while any of the process's simulated GPUs is busy: it drives them (the Python loop,
kernel launches, waiting in a synchronisation), and where no work is declared, the process's
own CPU time is what made them busy. Energy follows the simulator's clock, so on the virtual clock
the figures are the same on any host; the counters publish every millisecond in units of 2^-14 J,
as Intel servers' do, and wrap at ``max_energy_range_uj`` (``GPUENERGY_SIM_POWERCAP_RANGE_UJ``: one
number, or ``cpu=N,dram=N``; tiny ranges force wraps). Every test's virtual world starts the counters
afresh from the same seeded values. :meth:`SimulatedPowercap.exact_j` is the model's exact integral:
the truth tests compare with.

``GPUENERGY_SIM_POWERCAP_FAULT=unreadable`` makes ``energy_uj`` refuse to be read as a kernel since
5.10 does for a user who is not root (``PermissionError``, errno 13).
"""

from __future__ import annotations

import errno
import math
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Final

from ..host.powercap import HOST_DOMAINS, HostDomain

RANGE_ENV: Final = "GPUENERGY_SIM_POWERCAP_RANGE_UJ"
FAULT_ENV: Final = "GPUENERGY_SIM_POWERCAP_FAULT"
FAULTS: Final = ("unreadable",)
INTEL_SERVER_RANGE_UJ: Final = 262_143_328_850   # max_energy_range_uj of Intel Xeon packages and DRAM
UNIT_UJ: Final = 1e6 / 2 ** 14                    # 61.04 uJ: the energy unit of Intel servers
UPDATE_S: Final = 0.001                           # the counters publish about every millisecond


@dataclass(frozen=True)
class HostModel:
    """The simulated host: how many packages, and what each package and its DRAM draw (W)."""

    packages: int = 2
    package_idle_w: float = 75.0
    package_active_w: float = 45.0
    dram_idle_w: float = 10.0
    dram_active_w: float = 8.0

    def power_w(self, domain: HostDomain) -> tuple[float, float]:
        """(idle, extra while the host works) of one zone of ``domain``."""
        if domain == "cpu":
            return self.package_idle_w, self.package_active_w
        return self.dram_idle_w, self.dram_active_w


class SimulatedPowercap:
    """The tree of one simulated host, answering reads at the simulator's current moment."""

    def __init__(self, simulator: Any, model: HostModel | None = None,
                 range_uj: Mapping[HostDomain, int] | None = None, fault: str | None = None) -> None:
        self.simulator = simulator
        self.model = model or HostModel()
        self.range_uj = dict(range_uj) if range_uj is not None else ranges_from_env(os.environ.get(RANGE_ENV))
        self.fault = fault if fault is not None else _fault_from_env(os.environ.get(FAULT_ENV))
        self.root = PurePath(simulator.state_dir) / "powercap"
        seeds = random.Random(f"{simulator.seed}/powercap")
        self._start_uj = {(domain, package): math.floor(seeds.uniform(0, self.range_uj[domain]) / UNIT_UJ) * UNIT_UJ
                          for package in range(self.model.packages) for domain in HOST_DOMAINS}
        self._world: tuple[Any, ...] = ()
        self._world_start = 0.0
        self._busy_until = 0.0
        self._busy_s = 0.0

    # -- the tree, as host.powercap.Sysfs -----------------------------------------------------------
    def entries(self, folder: PurePath) -> list[str]:
        parts = self._parts(folder)
        if parts == ():
            return [f"intel-rapl:{p}" for p in range(self.model.packages)]
        if len(parts) == 1:
            return sorted(["name", "energy_uj", "max_energy_range_uj", f"{parts[0]}:0"])
        if len(parts) == 2:
            return ["energy_uj", "max_energy_range_uj", "name"]
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(folder))

    def read(self, path: PurePath) -> str:
        parts = self._parts(path.parent)
        if not parts or path.name not in ("name", "energy_uj", "max_energy_range_uj"):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        package = int(parts[0].split(":")[1])
        domain: HostDomain = "cpu" if len(parts) == 1 else "dram"
        if path.name == "name":
            return f"package-{package}\n" if domain == "cpu" else "dram\n"
        if path.name == "max_energy_range_uj":
            return f"{self.range_uj[domain]}\n"
        if self.fault == "unreadable":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return f"{self.counter_uj(domain, package)}\n"

    def _parts(self, folder: PurePath) -> tuple[str, ...]:
        try:
            parts = folder.relative_to(self.root).parts
        except ValueError:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(folder)) from None
        packages = {f"intel-rapl:{p}" for p in range(self.model.packages)}
        if (len(parts) >= 1 and parts[0] not in packages) or (len(parts) == 2 and parts[1] != f"{parts[0]}:0") \
                or len(parts) > 2:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(folder))
        return parts

    # -- the model ---------------------------------------------------------------------------------
    def counter_uj(self, domain: HostDomain, package: int) -> int:
        """What ``energy_uj`` shows now: the energy at the last publication, in whole units, wrapped."""
        now = self.simulator.clock.now()
        self._busy_at(now)                    # a new world first moves the world's start
        published = self._world_start + math.floor((now - self._world_start) / UPDATE_S + 1e-9) * UPDATE_S
        energy_uj = self._start_uj[(domain, package)] + self._zone_j(domain, max(published, self._world_start)) * 1e6
        return int(math.floor(energy_uj / UNIT_UJ) * UNIT_UJ) % self.range_uj[domain]

    def exact_j(self, domain: HostDomain, moment: float | None = None) -> float:
        """The model's exact energy of ``domain`` (all packages) since this world began, at ``moment``."""
        at = self.simulator.clock.now() if moment is None else moment
        return self.model.packages * self._zone_j(domain, at)

    def _zone_j(self, domain: HostDomain, moment: float) -> float:
        idle_w, active_w = self.model.power_w(domain)
        busy_s = self._busy_at(moment)        # first: a new world moves the world's start
        return idle_w * (moment - self._world_start) + active_w * busy_s

    def _busy_at(self, moment: float) -> float:
        """Seconds in this world up to ``moment`` during which any of the process's GPUs was busy."""
        timelines = tuple(_timelines(self.simulator))
        if len(timelines) != len(self._world) or any(a is not b for a, b in zip(timelines, self._world)):
            # simBeginTest gives each test a new world on new timelines: the counters start afresh
            self._world = timelines
            self._world_start = self._busy_until = 0.0 if self.simulator.clock.virtual else self.simulator.clock.now()
            self._busy_s = 0.0
        if moment > self._busy_until:
            self._busy_s += _union_s(timelines, self._busy_until, moment)
            self._busy_until = moment
            return self._busy_s
        return self._busy_s - _union_s(timelines, moment, self._busy_until)


def _timelines(simulator: Any) -> list[Any]:
    return list(simulator.simTimelines())


def _union_s(timelines: tuple[Any, ...], start: float, end: float) -> float:
    """How long within [start, end] at least one timeline had work running."""
    spans = sorted((max(s.start, start), min(s.end, end)) for timeline in timelines for s in timeline.segments
                   if s.dynamic_w > 0 and s.end > start and s.start < end)
    total, reach = 0.0, start
    for low, high in spans:
        if high > reach:
            total += high - max(low, reach)
            reach = high
    return total


def ranges_from_env(text: str | None) -> dict[HostDomain, int]:
    """``GPUENERGY_SIM_POWERCAP_RANGE_UJ``: one range for every zone, or ``cpu=N,dram=N``."""
    ranges: dict[HostDomain, int] = dict.fromkeys(HOST_DOMAINS, INTEL_SERVER_RANGE_UJ)
    text = (text or "").strip()
    if not text:
        return ranges
    for item in text.split(","):
        name, _, value = item.strip().rpartition("=")
        domains = HOST_DOMAINS if not name else tuple(d for d in HOST_DOMAINS if d == name.strip())
        if not domains or not value.strip().isdigit() or int(value) < 1000:
            raise ValueError(f"{RANGE_ENV}={text!r}: give a range in micro-joules (>= 1000) for every zone, "
                             f"or cpu=N,dram=N")
        for domain in domains:
            ranges[domain] = int(value)
    return ranges


def _fault_from_env(text: str | None) -> str | None:
    value = (text or "").strip().lower()
    if value and value not in FAULTS:
        raise ValueError(f"{FAULT_ENV}={text!r}: the simulated powercap tree knows the fault {', '.join(FAULTS)}")
    return value or None
