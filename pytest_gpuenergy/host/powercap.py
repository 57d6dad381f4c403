"""The host's CPU and DRAM energy counters, read through Linux powercap (RAPL).

The powercap framework shows each RAPL zone as a folder of small text files (the kernel's
``Documentation/ABI/testing/sysfs-class-powercap`` and ``Documentation/power/powercap/powercap.rst``,
https://docs.kernel.org/power/powercap/powercap.html): ``name``, ``energy_uj`` (the zone's energy
counter in micro-joules) and ``max_energy_range_uj`` (its range: the counter wraps to 0 beyond it).
``/sys/class/powercap`` lists every zone of the ``intel-rapl`` control type as ``intel-rapl:N`` (a
package, ``name`` "package-N") and its sub-zones inside it as ``intel-rapl:N:M`` (``name`` "core",
"uncore" or "dram"). AMD Zen processors use the same driver and names (``intel_rapl_msr.c`` covers
them), with no DRAM zone. What is read here:

* ``cpu``: every ``intel-rapl:N`` zone named ``package-N``, summed over the packages;
* ``dram``: every sub-zone named ``dram`` of such a package, summed.

``psys`` (the whole platform on client parts) and the ``intel-rapl-mmio`` control type (the same
package counter again, through MMIO) are left out: counting them would count the package twice.

Since Linux 5.10 (and 5.4.77 and other stable kernels) ``energy_uj`` is readable by root only
(commit 949dd0104c49, "powercap: restrict energy meter to root access": CVE-2020-8694, the
"Platypus" power side channel), which is what most users meet first (perun#49, codecarbon#232).
An unreadable counter is one line naming the file and the fix, never a traceback.

Where the files come from is a :class:`Sysfs`: the real file system (:class:`RealSysfs`), or the
simulator's tree (``sim/powercap.py``), which answers the same paths with the same text, so that
the parsing and the zone rules here are the code both run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Final, Literal, Protocol

from ..errors import HostEnergyError

POWERCAP_ROOT_ENV: Final = "GPUENERGY_POWERCAP_ROOT"
DEFAULT_ROOT: Final = Path("/sys/class/powercap")
HostDomain = Literal["cpu", "dram"]
HOST_DOMAINS: Final[tuple[HostDomain, ...]] = ("cpu", "dram")
_PACKAGE_ZONE = re.compile(r"intel-rapl:(\d+)")
_PACKAGE_NAME = re.compile(r"package-(\d+)")
_MAX_TEXT = 64            # a counter is a number: anything longer is not one


class Sysfs(Protocol):
    """Where zone files are read: a folder's entries and a file's text (OSError as the OS raises it)."""

    def entries(self, folder: PurePath) -> list[str]: ...

    def read(self, path: PurePath) -> str: ...


class RealSysfs:
    """The host's own files (``/sys/class/powercap``, or a copy of such a tree)."""

    def entries(self, folder: PurePath) -> list[str]:
        return sorted(os.listdir(folder))

    def read(self, path: PurePath) -> str:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(_MAX_TEXT + 1)


@dataclass(frozen=True)
class Zone:
    """One RAPL zone this package reads: a package (``cpu``) or a package's DRAM (``dram``)."""

    domain: HostDomain
    folder: PurePath
    name: str                  # as the zone's ``name`` file says: "package-0", "dram"
    package: int
    range_uj: int              # max_energy_range_uj: the counter wraps to 0 beyond it

    @property
    def counter(self) -> PurePath:
        return self.folder / "energy_uj"

    @property
    def label(self) -> str:
        return self.name if self.domain == "cpu" else f"{self.name} of package-{self.package}"


def powercap_root() -> Path:
    """``GPUENERGY_POWERCAP_ROOT`` (a copy of the tree, or another mount), else ``/sys/class/powercap``."""
    text = os.environ.get(POWERCAP_ROOT_ENV, "").strip()
    return Path(text) if text else DEFAULT_ROOT


def find_zones(sysfs: Sysfs, root: PurePath, wanted: tuple[HostDomain, ...]) -> list[Zone]:
    """The zones of the ``wanted`` domains under ``root``; a domain with none is an error naming the fix."""
    try:
        names = sysfs.entries(root)
    except FileNotFoundError:
        raise HostEnergyError(
            f"no Linux powercap tree at {root} (not Linux, or a container without /sys/class/powercap): "
            f"the host's CPU and DRAM energy cannot be read here; drop cpu,dram from --energy-domains "
            f"(or point {POWERCAP_ROOT_ENV} at a powercap tree)") from None
    except OSError as exc:
        raise HostEnergyError(f"{root}: cannot list the powercap zones: {exc.strerror or exc}; "
                              f"drop cpu,dram from --energy-domains") from None
    zones: list[Zone] = []
    for entry in names:
        if not _PACKAGE_ZONE.fullmatch(entry):
            continue
        folder = root / entry
        found = _PACKAGE_NAME.fullmatch(_text(sysfs, folder / "name"))
        if found is None:
            continue                       # psys: the platform, not a package
        package = int(found.group(1))
        if "cpu" in wanted:
            zones.append(Zone("cpu", folder, found.group(0), package, _range_uj(sysfs, folder)))
        if "dram" in wanted:
            zones += _dram_zones(sysfs, folder, entry, package)
    for domain in wanted:
        if not any(zone.domain == domain for zone in zones):
            raise HostEnergyError(_missing(domain, root))
    return zones


def _dram_zones(sysfs: Sysfs, folder: PurePath, entry: str, package: int) -> list[Zone]:
    zones = []
    for sub in sysfs.entries(folder):
        if re.fullmatch(re.escape(entry) + r":\d+", sub) and _text(sysfs, folder / sub / "name") == "dram":
            zones.append(Zone("dram", folder / sub, "dram", package, _range_uj(sysfs, folder / sub)))
    return zones


def _missing(domain: HostDomain, root: PurePath) -> str:
    if domain == "cpu":
        return (f"no RAPL package zone (intel-rapl:N named package-N) under {root}: the intel_rapl_msr "
                f"driver is not loaded (sudo modprobe intel_rapl_msr) or this CPU has no RAPL; drop cpu from "
                f"--energy-domains")
    return (f"no RAPL DRAM zone (a sub-zone named dram) under {root}: this CPU does not report DRAM energy "
            f"(client Intel parts and AMD processors have none); drop dram from --energy-domains")


def read_counter_uj(sysfs: Sysfs, zone: Zone) -> int:
    """The zone's ``energy_uj`` now (an unreadable or damaged counter is one line with the fix)."""
    return _number(sysfs, zone.counter)


def _range_uj(sysfs: Sysfs, folder: PurePath) -> int:
    value = _number(sysfs, folder / "max_energy_range_uj")
    if value <= 0:
        raise HostEnergyError(f"{folder / 'max_energy_range_uj'}: the counter's range is {value} uJ; "
                              f"a powercap zone's range is positive (a damaged copy of the tree?)")
    return value


def _number(sysfs: Sysfs, path: PurePath) -> int:
    text = _text(sysfs, path).strip()
    if not text.isdigit() or len(text) > _MAX_TEXT:
        raise HostEnergyError(f"{path}: not a powercap counter (it reads {text[:20]!r}, expected a whole number "
                              f"of micro-joules)")
    return int(text)


def _text(sysfs: Sysfs, path: PurePath) -> str:
    try:
        return sysfs.read(path).strip()
    except PermissionError:
        raise HostEnergyError(unreadable_message(path)) from None
    except OSError as exc:
        raise HostEnergyError(f"{path}: cannot read it: {exc.strerror or exc}; drop cpu,dram from "
                              f"--energy-domains") from None


def unreadable_message(path: PurePath) -> str:
    """The one line for a counter only root may read (Linux 5.10 and later), with the fix."""
    folder = path.parent
    root = folder.parent if _PACKAGE_ZONE.fullmatch(folder.name) else folder.parent.parent
    return (f"{path}: permission denied: since Linux 5.10 RAPL energy counters are readable by root only "
            f"(CVE-2020-8694); let this user read them: sudo chmod a+r {root}/intel-rapl:*/energy_uj "
            f"{root}/intel-rapl:*/max_energy_range_uj {root}/intel-rapl:*/intel-rapl:*/energy_uj "
            f"{root}/intel-rapl:*/intel-rapl:*/max_energy_range_uj (until the next boot; a udev rule keeps it: "
            f"see docs/how-to/cpu-dram.md), or drop cpu,dram from --energy-domains")
