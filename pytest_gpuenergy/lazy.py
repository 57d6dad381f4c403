"""Package attributes imported when first used (PEP 562), for the packages that re-export a public API.

A package's ``__init__`` that imports its modules makes every import of one of them pay for all:
``from ..meter.results import EnergyResult`` would load the meter's threads and integration, and
``import pytest_gpuenergy.cli`` the whole plugin. The ``gpuenergy`` command and every pytest
session start there, so the packages export their names lazily instead. ``LazyModule`` does the
same for a heavy library that a module needs in a few functions only (numpy).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose ``exports`` map a name to its module
    (relative to the package, e.g. ``".results"``)."""
    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(importlib.import_module(package), name, value)     # the next access is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *exports})

    return __getattr__, __dir__


class LazyModule:
    """A module imported when one of its attributes is first used, for a module that needs a heavy
    library in a few functions only: ``meter.attribution`` needs numpy to split a region among its
    phases, but every measuring session imports it (``meter.region``), and numpy's 85 modules cost
    a session 0.1-0.5 s before its first test (a tenth of a suite of 600 short tests). Declare it as
    ``if TYPE_CHECKING: import numpy as np`` / ``else: np = LazyModule("numpy")`` so that type
    checkers see the real module."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attribute)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported when first used>"
