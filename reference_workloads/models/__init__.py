"""One module per reference workload; importing this package registers all nine.

``list_workloads()`` reports them in Fathom's order (Adolf et al., "Fathom: Reference Workloads
for Modern Deep Learning Methods", IISWC 2016), then the transformer, whatever the import order.
"""

from reference_workloads.models import (  # noqa: F401  (imported for registration)
    alexnet,
    autoenc,
    deepq,
    memnet,
    residual,
    seq2seq,
    speech,
    transformer,
    vgg,
)

__all__ = ["alexnet", "vgg", "residual", "autoenc", "deepq", "memnet", "seq2seq", "speech", "transformer"]
