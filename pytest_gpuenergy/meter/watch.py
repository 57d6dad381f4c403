"""``energy_meter.watch(model, optimizer)``: the phases of a PyTorch training step, marked by hooks.

A team that wants to know where a step's energy goes should not have to wrap its training loop in
``energy_meter.phase(...)`` blocks. A watch marks the three phases PyTorch itself can point to:

* ``forward``: from the model's forward pre-hook to its forward hook (the outermost call only; a
  submodule, or the model calling itself, is part of it);
* ``backward``: from the moment autograd reaches the model's output (a hook on each output tensor
  that requires grad) to the end of that backward pass (a callback autograd runs when the pass is
  done, as DistributedDataParallel uses). The loss's own few backward kernels come before it and are
  ``other``;
* ``update``: the optimizer's ``step``, between its step pre- and post-hooks.

Everything else (the next batch, the loss, ``zero_grad``, gradient clipping, Python) is ``other``.
The marks are ``energy_meter.phase`` marks, so they are dated by the GPU's queue (never a
synchronisation) and follow its rules; the watch only decides when to open and close them. Phases
never nest: while any phase is open (one of the watch's, or the test's own ``energy_meter.phase``),
a hook that would open another does nothing, so a forward run again inside backward (activation
checkpointing) stays ``backward``, a second forward before one backward (gradient accumulation) is a
second ``forward`` phase, an evaluation forward under ``torch.no_grad()`` is a ``forward`` with no
backward after it, and a step without a backward simply has none. Outside a measured region the
hooks mark nothing. Leaving the ``with`` block removes every hook and closes a phase an exception
left open.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ..errors import MeasurementError

if TYPE_CHECKING:
    from .energy_meter import EnergyMeter

FORWARD, BACKWARD, UPDATE = "forward", "backward", "update"


class Watch:
    """The hooks of one ``with energy_meter.watch(model, optimizer):`` block (see the module's docstring)."""

    def __init__(self, meter: EnergyMeter, model: Any, optimizer: Any = None) -> None:
        import torch

        call = "energy_meter.watch(model, optimizer)"
        if not isinstance(model, torch.nn.Module):
            raise MeasurementError(f"{call}: model must be a torch.nn.Module (the network whose forward and "
                                   f"backward to mark), got {type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise MeasurementError(f"{call}: optimizer must be a torch.optim.Optimizer (whose step is the update) "
                                   f"or None, got {type(optimizer).__name__}")
        self.meter = meter
        self.model = model
        self.optimizer = optimizer
        self._handles: list[Any] = []
        self._open: tuple[str, AbstractContextManager[None]] | None = None
        self._depth = 0             # the model's forward calls inside the open forward phase

    # -- the with block ------------------------------------------------------------------------
    def __enter__(self) -> Watch:
        if self._handles:
            raise MeasurementError("energy_meter.watch(model, optimizer) is already active: enter each watch once")
        model, optimizer = self.model, self.optimizer
        self._handles = [model.register_forward_pre_hook(self._before_forward, prepend=True),
                         model.register_forward_hook(self._after_forward, always_call=True)]
        if optimizer is not None:
            self._handles += [optimizer.register_step_pre_hook(self._before_update),
                              optimizer.register_step_post_hook(self._after_update)]
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self._close()
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles = []

    @property
    def hooks(self) -> int:
        """How many hooks the watch holds now (0 once its block has ended)."""
        return len(self._handles)

    # -- marks ---------------------------------------------------------------------------------
    def _can_open(self) -> bool:
        """Inside a measured region (or measure()'s warm-up) with no phase open, the watch's or the test's."""
        meter = self.meter
        return (meter._marking is not None or meter._warming) and meter._open_phase is None and self._open is None

    def _start(self, name: str) -> None:
        mark = self.meter.phase(name)
        mark.__enter__()
        self._open = (name, mark)

    def _close(self, name: str | None = None) -> None:
        """End the open phase (only if it is ``name``, where given)."""
        if self._open is None or (name is not None and self._open[0] != name):
            return
        mark, self._open = self._open[1], None
        self._depth = 0
        mark.__exit__(None, None, None)

    # -- hooks ---------------------------------------------------------------------------------
    def _before_forward(self, module: Any, inputs: Any) -> None:
        if self._open is not None and self._open[0] == FORWARD:
            self._depth += 1                          # the model calling itself: still the same forward
            return
        if self._open is not None and self._open[0] == BACKWARD and not _in_backward():
            self._close(BACKWARD)                     # a backward that raised never reached its end
        if self._can_open():
            self._start(FORWARD)
            self._depth = 1

    def _after_forward(self, module: Any, inputs: Any, output: Any) -> None:
        if self._open is not None and self._open[0] == FORWARD:
            self._depth -= 1
            if self._depth > 0:
                return
            self._close(FORWARD)
        if self.meter._marking is None and not self.meter._warming:
            return
        for tensor in _grad_tensors(output):
            tensor.register_hook(self._at_output_grad)

    def _at_output_grad(self, grad: Any) -> None:
        if not self._can_open():
            return                                    # the backward already open (several outputs), or no region
        from torch.autograd import Variable

        self._start(BACKWARD)
        Variable._execution_engine.queue_callback(self._after_backward)

    def _after_backward(self) -> None:
        self._close(BACKWARD)

    def _before_update(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._can_open():
            self._start(UPDATE)

    def _after_update(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._close(UPDATE)


def _in_backward() -> bool:
    import torch

    return bool(torch._C._current_graph_task_id() != -1)


def _grad_tensors(output: Any) -> Iterator[Any]:
    """The tensors in a forward's output that autograd will reach in a backward pass."""
    import torch
    from torch.utils._pytree import tree_flatten

    if not torch.is_grad_enabled():
        return
    for item in tree_flatten(output)[0]:
        if isinstance(item, torch.Tensor) and item.requires_grad:
            yield item
