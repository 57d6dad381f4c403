"""Reference workloads for pytest-gpuenergy: the Fathom suite and a transformer, in ``torch.nn``.

Each workload comes in a ``"tiny"`` size (CPU seconds, for tests and the simulator) and a
``"full"`` size (the paper's configuration, for a GPU), in ``"train"`` and ``"infer"`` mode, on a
fixed seeded synthetic batch of the real data's shapes::

    from reference_workloads import build, list_workloads
    workload = build("alexnet", size="tiny", mode="train", device="cpu", seed=0)
    losses = workload.run(10)
"""

from reference_workloads import models as _models  # noqa: F401  (registers the nine workloads)
from reference_workloads.registry import (
    MODES,
    SIZES,
    Workload,
    WorkloadSpec,
    build,
    build_model,
    count_parameters,
    list_workloads,
)

__all__ = [
    "MODES",
    "SIZES",
    "Workload",
    "WorkloadSpec",
    "build",
    "build_model",
    "count_parameters",
    "list_workloads",
]
