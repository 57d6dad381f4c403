"""Holding a GPU setting (a power cap, an SM clock cap) for one test: the one way both fixtures apply
it, skip a case the GPU cannot take, and put the GPU back whatever the test did."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..errors import CapOutOfRange, CapSyntaxError, GpuEnergyError, LimitRestoreError


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


def marker_settings(node: Any, name: str, parse: Callable[..., list[Any]], what: str, example: str) -> list[Any] | None:
    """The settings a ``gpu_caps``/``gpu_clocks`` marker gives one test, or None without one; a bad
    value raises CapSyntaxError naming the marker."""
    marker = node.get_closest_marker(name)
    if marker is None:
        return None
    if marker.kwargs:
        raise CapSyntaxError(f"{name} takes {what}s as positional arguments, got {sorted(marker.kwargs)}")
    if not marker.args:
        raise CapSyntaxError(f"{name} needs at least one {what}, e.g. @pytest.mark.{name}({example})")
    args = marker.args[0] if len(marker.args) == 1 and isinstance(marker.args[0], (list, tuple)) else marker.args
    return parse(list(args), source=name)
