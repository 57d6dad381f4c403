"""Which GPUs a process may use: the compute runtimes' visibility variables, which the vendor
libraries ignore (``CUDA_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``), and a
GPU named by index or UUID (``--gpu-devices``, the variables' entries)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..errors import GpuSelectionError

if TYPE_CHECKING:
    from .device import Gpu

#: Which variables hide GPUs from the compute runtime, per library, in the order the runtime applies
#: them; of the names in one step the first that is set counts. NVIDIA: CUDA's. AMD (ROCm's "GPU
#: isolation techniques"): ``ROCR_VISIBLE_DEVICES`` first, then HIP's, for which HIP also reads
#: ``CUDA_VISIBLE_DEVICES`` ("for portability across vendors") where ``HIP_VISIBLE_DEVICES`` is unset.
VISIBILITY_VARIABLES: dict[str, tuple[tuple[str, ...], ...]] = {
    "nvml": (("CUDA_VISIBLE_DEVICES",),),
    "amdsmi": (("ROCR_VISIBLE_DEVICES",), ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")),
}


def visible_gpus(gpus: Sequence[Gpu], variables: Mapping[str, str | None] | None = None, *,
                 simulated: bool = False) -> list[Gpu]:
    """The GPUs the compute runtimes may use: each library's GPUs filtered by its variable
    (``VISIBILITY_VARIABLES``), NVIDIA's first.

    The libraries themselves ignore the variables, so the plugin applies them: entries are the
    library's indices or (prefixes of) UUIDs; like CUDA, parsing stops at the first entry that
    matches nothing. For AMD, ``ROCR_VISIBLE_DEVICES`` picks first and ``HIP_VISIBLE_DEVICES`` (else
    ``CUDA_VISIBLE_DEVICES``) indexes what it left. Indices are PCI order: set
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA agrees. ``variables``: the environment (default
    ``os.environ``). A variable set to "" hides every GPU of its library; on the simulator it is
    ignored (CPU-only CI jobs set it, and simulated GPUs stand in for none of the host's).
    """
    if variables is None:
        variables = os.environ
    chosen: list[Gpu] = []
    for library, steps in VISIBILITY_VARIABLES.items():
        mine = [g for g in gpus if g.library == library]
        for names in steps:
            value = next((found for name in names if (found := variables.get(name)) is not None), None)
            if value is None or (simulated and not split_spec(value)):
                continue
            mine = _visible(mine, value, next(name for name in names if variables.get(name) is not None))
        chosen += mine
    return chosen


def hiding_variable(library: str, variables: Mapping[str, str | None] | None = None) -> str | None:
    """The variable set to "" that hides every GPU of ``library`` from its runtime (CPU-only CI jobs
    set ``CUDA_VISIBLE_DEVICES=""``, which HIP reads too), or None: ``auto`` then counts none found."""
    if variables is None:
        variables = os.environ
    for names in VISIBILITY_VARIABLES[library]:
        name = next((name for name in names if variables.get(name) is not None), None)
        if name is not None and not split_spec(variables[name]):
            return name
    return None


def _visible(gpus: Sequence[Gpu], spec: str, name: str = "") -> list[Gpu]:
    """The GPUs ``spec`` (the variable ``name``) names, in its order: an index counts the GPUs left so
    far (as HIP's variable indexes what ROCR's left), a UUID prefix names one.

    An AMD UUID that matches none is an error, not a GPU silently hidden: ROCR's own UUIDs (rocminfo's)
    need not be the ones AMD SMI gives, which the plugin shows."""
    chosen: list[Gpu] = []
    for item in split_spec(spec):
        if item.isdigit():
            gpu = gpus[int(item)] if int(item) < len(gpus) else None
        else:
            gpu = match_gpu(gpus, item, by_library_index=True)
            if gpu is None and gpus and gpus[0].library == "amdsmi":
                known = ", ".join(f"{g.library_index} ({g.uuid})" for g in gpus)
                raise GpuSelectionError(f"{name}: no AMD GPU has the UUID {item!r} as AMD SMI reports them ({known}); "
                                        f"name them by index (as gpuenergy info lists them) instead")
        if gpu is None:
            break
        if gpu not in chosen:
            chosen.append(gpu)
    return chosen


def split_spec(spec: str | Sequence[str] | None) -> list[str]:
    if spec is None:
        return []
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    return [p.strip() for p in parts if p.strip()]


def match_gpu(gpus: Sequence[Gpu], item: str, *, by_library_index: bool) -> Gpu | None:
    if item.isdigit():
        return next((g for g in gpus if (g.library_index if by_library_index else g.index) == int(item)), None)
    if item.startswith("GPU-") and len(item) > 4:
        matches = [g for g in gpus if g.uuid.startswith(item)]
        return matches[0] if len(matches) == 1 else None
    return None
