"""meter/region.py's PendingResult on its own: a measurement's figure, worked out when first needed.

The plugin's session keeps one per measured block, tries them between tests (``try_resolve``, never
waiting) and at the end (``resolve``), and its reports hang on them with ``then``."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gpuenergy.meter.region import PendingResult


class Build:
    """A result's work: None until ``ready``; records how it was asked (waiting or not)."""

    def __init__(self) -> None:
        self.result: Any = object()
        self.ready = False
        self.asked: list[bool] = []

    def __call__(self, wait: bool) -> Any:
        self.asked.append(wait)
        return self.result if self.ready or wait else None


def test_trying_without_waiting_gives_none_until_the_figure_is_there_then_the_figure():
    build = Build()
    pending = PendingResult(build)
    assert pending.try_resolve() is None and not pending.resolved
    build.ready = True
    assert pending.try_resolve() is build.result and pending.resolved
    assert build.asked == [False, False]            # never asked to wait
    assert pending.try_resolve() is build.result and build.asked == [False, False]   # kept, not worked out again


def test_resolving_asks_to_wait():
    build = Build()
    assert PendingResult(build).resolve() is build.result and build.asked == [True]


def test_a_callback_waits_for_the_figure_and_gets_it_once():
    build = Build()
    pending = PendingResult(build)
    got: list[Any] = []
    pending.then(got.append)
    pending.try_resolve()
    assert got == []                                 # not there yet: not called
    build.ready = True
    pending.try_resolve()
    pending.try_resolve()
    assert got == [build.result]


def test_a_callback_on_a_figure_already_worked_out_is_called_at_once():
    result = object()
    pending = PendingResult.of(result)  # type: ignore[arg-type]
    got: list[Any] = []
    pending.then(got.append)
    assert got == [result]


def test_an_error_in_working_it_out_is_raised_again_each_time_it_is_asked_for():
    def build(wait: bool) -> Any:
        raise RuntimeError("the counter is stuck")

    pending = PendingResult(build)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="stuck"):
            pending.try_resolve()
    assert pending.resolved


def test_the_limits_a_region_records_are_read_each_time_the_default_once(sim_state, monkeypatch):
    """Without a cap, each region records the limit the GPU enforces then (another tool may have changed
    it between two regions) and the board's default, which is a constant: one library call a region,
    not ``limits()``'s four."""
    from pytest_gpuenergy.gpu.device import open_backend
    from pytest_gpuenergy.meter.region import current_limits

    backend = open_backend("sim")
    try:
        gpu = backend.all_gpus[0]
        asked = []
        limits = gpu.limits
        monkeypatch.setattr(gpu, "limits", lambda: asked.append(1) or limits())
        first = current_limits([gpu])
        gpu.set_limit_mw(350_000)                   # the simulated GPU; as `nvidia-smi -pl 350` would
        second = current_limits([gpu])
        assert first.enforced_w == {gpu.uuid: 700.0} and second.enforced_w == {gpu.uuid: 350.0}
        assert first.default_w == second.default_w == {gpu.uuid: 700.0}
        assert first.label == "current" and first.requested_w == {gpu.uuid: None}
        assert len(asked) == 1                      # the default, once
    finally:
        backend.close()
