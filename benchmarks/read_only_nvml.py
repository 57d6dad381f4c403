"""A safety net for runs on a real, shared GPU: every NVML call that could change the GPU refuses.

Imported (``import read_only_nvml``) or loaded as a pytest plugin (``-p read_only_nvml`` with
``benchmarks/`` on ``PYTHONPATH``), it replaces pynvml's setters and resets with functions that
raise ``NVMLError_NoPermission`` and append the call's name to ``$GPUENERGY_REFUSED_LOG`` (when
set). The plugin itself never calls them without ``--gpu-caps``; this makes that a guarantee for
the machine's owner rather than a promise, and the log proves it afterwards (it must stay empty).
"""

from __future__ import annotations

import os

import pynvml

REFUSED = tuple(
    name for name in dir(pynvml)
    if name.startswith(("nvmlDeviceSet", "nvmlDeviceReset", "nvmlDeviceClear", "nvmlSet", "nvmlUnitSet"))
)


def _refuse(name: str):
    def refused(*args, **kwargs):
        log = os.environ.get("GPUENERGY_REFUSED_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(name + "\n")
        raise pynvml.NVMLError_NoPermission()
    refused.__name__ = name
    return refused


for _name in REFUSED:
    setattr(pynvml, _name, _refuse(_name))
