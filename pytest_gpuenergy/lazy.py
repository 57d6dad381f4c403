"""Package attributes imported when first used (PEP 562), for the packages that re-export a public API.

A package's ``__init__`` that imports its modules makes every import of one of them pay for all:
``from ..meter.results import EnergyResult`` would load the meter's threads and integration, and
``import pytest_gpuenergy.cli`` the whole plugin. The ``gpuenergy`` command and every pytest
session start there, so the packages export their names lazily instead.
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
