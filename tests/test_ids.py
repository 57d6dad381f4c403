"""Case ids (pytest_gpuenergy/runs/ids.py): the ``#n`` suffix of a test's n-th measured region and a
case's test without the cap labels the plugin parametrised it with.

These tests exist for the mutation testing of runs/ (benchmarks/mutation.py): budgets files, run
documents and comparisons pair cases by these strings, so every branch of the parsing is pinned
to the exact id it must give.
"""

from __future__ import annotations

import pytest

from pytest_gpuenergy.runs import ids  # not its test_key by name: pytest would collect it
from pytest_gpuenergy.runs.ids import node_id_of, split_region


@pytest.mark.parametrize(("case_id", "expected"), [
    ("t.py::test_x[60%]#2", ("t.py::test_x[60%]", 2)),
    ("t.py::test_x#12", ("t.py::test_x", 12)),
    ("t.py::test_x[a#1]#3", ("t.py::test_x[a#1]", 3)),     # the last '#n' is the region
    ("t.py::test_x#0", ("t.py::test_x", 0)),
])
def test_a_region_suffix_splits_into_the_node_id_and_the_region_number(case_id, expected):
    assert split_region(case_id) == expected


@pytest.mark.parametrize("case_id", [
    "t.py::test_x[60%]",        # no suffix
    "t.py::test_x#",            # no digits
    "t.py::test_x#2a",          # not digits to the end
    "#2",                       # nothing before the '#'
    "t.py::#2",                 # a node id cannot end in '::'
    "t.py::test_x[#2]",
])
def test_an_id_without_a_region_suffix_is_its_own_node_id_with_no_region(case_id):
    assert split_region(case_id) == (case_id, None)


@pytest.mark.parametrize(("case_id", "expected"), [
    ("t.py::test_x[60%]#2", "t.py::test_x[60%]"),
    ("t.py::test_x#3", "t.py::test_x"),
    ("t.py::test_x#1", "t.py::test_x#1"),      # '#1' is no region suffix the plugin writes: kept
    ("t.py::test_x#0", "t.py::test_x#0"),
    ("t.py::test_x[60%]", "t.py::test_x[60%]"),
    ("t.py::#2", "t.py::#2"),
])
def test_the_node_id_drops_only_a_second_or_later_region_suffix(case_id, expected):
    assert node_id_of(case_id) == expected


@pytest.mark.parametrize(("case_id", "labels", "expected"), [
    ("t.py::test_x[resnet-60%]", ("60%",), "t.py::test_x[resnet]"),
    ("t.py::test_x[60%]", ("60%",), "t.py::test_x"),
    ("t.py::test_x[resnet-60%]#2", ("60%",), "t.py::test_x[resnet]#2"),
    ("t.py::test_x[60%]#1", ("60%",), "t.py::test_x#1"),
    ("t.py::test_x[resnet-60%-1200MHz]", ("60%", "1200MHz"), "t.py::test_x[resnet]"),
    ("t.py::test_x[60%-1200MHz]#3", ("60%", "1200MHz"), "t.py::test_x#3"),
    ("t.py::test_x[resnet-1200MHz]", ("60%", "1200MHz"), "t.py::test_x[resnet]"),
    ("t.py::test_x[resnet-60%]", ("200W",), "t.py::test_x[resnet-60%]"),         # another cap: kept
    ("t.py::test_x[resnet60%]", ("60%",), "t.py::test_x[resnet60%]"),           # not a whole label
    ("t.py::test_x[60%-resnet]", ("60%",), "t.py::test_x[60%-resnet]"),          # not last in the id
    ("t.py::test_x", ("60%",), "t.py::test_x"),
    ("t.py::test_x[60%]", (None,), "t.py::test_x[60%]"),
    ("t.py::test_x[None]", (None,), "t.py::test_x[None]"),     # no label is not the word None
    ("t.py::test_x[]", ("",), "t.py::test_x[]"),                # an empty label strips nothing
    ("t.py::test_x[resnet-]", ("",), "t.py::test_x[resnet-]"),
    ("t.py::test_x[resnet-60%]", (), "t.py::test_x[resnet-60%]"),
    ("t.py::test_x[resnet-60%]", ("60%", None), "t.py::test_x[resnet]"),      # no clock cap: the cap still goes
])
def test_a_cases_test_key_is_its_id_without_the_cap_labels_last_in_it(case_id, labels, expected):
    assert ids.test_key(case_id, *labels) == expected


def test_the_clock_label_is_stripped_before_the_cap_label_that_precedes_it():
    # The plugin puts the cap's label, then the clock cap's, last in the id: "[w-60%-1200MHz]".
    # Read from the end, the clock label goes first; in the given order neither would match.
    assert ids.test_key("t.py::test_x[w-60%-1200MHz]", "60%", "1200MHz") == "t.py::test_x[w]"
    assert ids.test_key("t.py::test_x[w-1200MHz-60%]", "60%", "1200MHz") == "t.py::test_x[w-1200MHz]"
