"""Holding a GPU setting (a power cap, an SM clock cap) for one test: the one way both fixtures apply
it, skip a case the GPU cannot take, and put the GPU back whatever the test did."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..errors import CapOutOfRange, GpuEnergyError, LimitRestoreError


def held_setting(request: pytest.FixtureRequest, session: Any, capper: Any, spec: Any, skipped_property: str,
                 activate: Callable[[Any], None]) -> Iterator[Any]:
    """Apply ``spec`` with ``capper`` (or describe the GPUs as they are without one), yield the value,
    restore after. A setting outside the GPU's range skips the case and records why (the property
    reaches pytest-xdist's controller); any other failure fails the test in one line."""
    try:
        value = capper.apply(spec) if spec is not None else capper.current()
    except CapOutOfRange as exc:
        session.release(capper)
        request.node.user_properties.append((skipped_property, spec.label if spec is not None else "current"))
        pytest.skip(str(exc))
    except GpuEnergyError as exc:
        session.release(capper)
        pytest.fail(str(exc), pytrace=False)
    activate(value)
    try:
        yield value
    finally:
        activate(None)
        try:
            session.release(capper)
        except LimitRestoreError as exc:
            pytest.fail(f"{exc}. Fix it with: gpuenergy restore", pytrace=False)
