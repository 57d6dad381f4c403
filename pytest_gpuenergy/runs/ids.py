"""What a case is called: a pytest node id, ``#n`` for a test's n-th measured region, and the same id
without the settings the plugin parametrised it with (what a budgets file names a test by).

Plain string work, read at every pytest start that uses a budgets file, so it loads nothing else.
"""

from __future__ import annotations

import re

_REGION_SUFFIX = re.compile(r"(.+)#(\d+)")


def split_region(case_id: str) -> tuple[str, int | None]:
    """A case id as (test node id, n) for a test's n-th measured region (``...::test_x[60%]#2``),
    or (case id, None) without a region suffix. The one reader of the ``#n`` suffix."""
    match = _REGION_SUFFIX.fullmatch(case_id)
    if match and not match.group(1).endswith("::"):
        return match.group(1), int(match.group(2))
    return case_id, None


def node_id_of(case_id: str) -> str:
    """The test's node id: the case id without the ``#n`` of a test's n-th measured region."""
    node_id, region = split_region(case_id)
    return node_id if region is not None and region >= 2 else case_id


def test_key(case_id: str, *labels: str | None) -> str:
    """A case's test without its settings: ``t.py::test_x[resnet-60%]`` -> ``t.py::test_x[resnet]``
    (``labels``: the cap's and the clock cap's, last in the id as the plugin puts them); a test's
    second measured region keeps its ``#2``."""
    node_id, region = split_region(case_id)
    suffix = f"#{region}" if region is not None else ""
    for label in labels[::-1]:
        if not label or not node_id.endswith("]"):
            continue
        if node_id.endswith(f"[{label}]"):
            node_id = node_id[: -len(label) - 2]
        elif node_id.endswith(f"-{label}]"):
            node_id = node_id[: -len(label) - 2] + "]"
    return node_id + suffix
