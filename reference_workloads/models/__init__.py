"""One module per reference workload; importing this package registers all nine.

The import order below is the order ``list_workloads()`` reports: Fathom's eight (Adolf et al.,
"Fathom: Reference Workloads for Modern Deep Learning Methods", IISWC 2016), then the transformer.
"""

from reference_workloads.models import (  # noqa: F401  (imported for registration)
    alexnet,
    vgg,
    residual,
    autoenc,
    deepq,
    memnet,
    seq2seq,
    speech,
    transformer,
)

__all__ = ["alexnet", "vgg", "residual", "autoenc", "deepq", "memnet", "seq2seq", "speech", "transformer"]
