"""runs/validation.py on its own: every check at its edge, word for word (what a damaged file or a
mistyped marker argument is told). The end-to-end damage is in test_damaged_inputs.py."""

from __future__ import annotations

import math

import pytest

from pytest_gpuenergy.errors import JsonInputError
from pytest_gpuenergy.runs.validation import (
    MAX_INT_DIGITS,
    MAX_NESTING,
    MIN_NONZERO,
    bounded_number,
    figure_problem,
    parse_json,
    shown,
)

# -- shown: a value in a message ---------------------------------------------------------------------

def test_a_value_is_shown_whole_up_to_sixty_characters_then_cut_to_sixty():
    assert shown("a" * 58) == repr("a" * 58)                         # 60 characters with the quotes
    assert shown("a" * 59) == repr("a" * 59)[:57] + "..."            # 61: cut to 57 and "..."
    assert len(shown("a" * 59)) == 60
    assert shown("abcdef", width=5) == "'a..."


def test_an_integer_too_long_to_print_is_described_by_its_size_and_sign():
    assert shown(2 ** 200 - 1, width=100) == repr(2 ** 200 - 1)       # 200 bits: printed
    assert shown(2 ** 200) == "an integer of about 61 digits"         # 201 bits
    assert shown(-(2 ** 200)) == "-an integer of about 61 digits"
    assert shown([10 ** 5000]) == "a list holding a number too long to print"


# -- parse_json: what no file of ours holds -------------------------------------------------------------

def test_a_document_that_is_a_bare_value_is_read_not_a_crash():
    assert parse_json("5") == 5 and parse_json('"text"') == "text" and parse_json("null") is None


def test_integers_of_up_to_thirty_digits_are_read_and_longer_ones_refused():
    assert parse_json("9" * MAX_INT_DIGITS) == int("9" * MAX_INT_DIGITS)
    assert parse_json("-" + "9" * MAX_INT_DIGITS) == -int("9" * MAX_INT_DIGITS)
    with pytest.raises(JsonInputError, match=r"^an integer of 31 digits \(at most 30 are read\)$"):
        parse_json("9" * (MAX_INT_DIGITS + 1))


def test_nesting_of_thirty_two_levels_is_read_and_deeper_refused():
    assert parse_json("[" * MAX_NESTING + "]" * MAX_NESTING) is not None
    assert parse_json('{"a":' * (MAX_NESTING - 1) + "[]" + "}" * (MAX_NESTING - 1)) is not None
    with pytest.raises(JsonInputError, match=r"^nested deeper than 32 levels$"):
        parse_json("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1))
    with pytest.raises(JsonInputError, match=r"^nested deeper than 32 levels$"):
        parse_json('{"a":' * MAX_NESTING + "[]" + "}" * MAX_NESTING)


# -- figure_problem: a run document's figure -------------------------------------------------------------

def test_a_figure_in_its_range_has_no_problem_at_either_end():
    assert figure_problem("ets_j", 0) is None and figure_problem("ets_j", 1e12) is None
    assert figure_problem("ets_j", MIN_NONZERO) is None
    assert figure_problem("unlisted", -5.0) is None                   # no range: any finite number


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("ets_j", "12", "must be a number, got '12'"),
    ("ets_j", True, "must be a number, got True"),
    ("ets_j", -1.0, "must be a number of J from 0 to 1e+12, got -1.0"),
    ("ets_j", 1.5e12, "must be a number of J from 0 to 1e+12, got 1500000000000.0"),
    ("time_s", math.nan, "must be a number of s from 0 to 1e+07, got nan"),
    ("ets_j", 5e-16, "must be 0 or at least 1e-15 J, got 5e-16"),
    ("unlisted", math.inf, "must be a finite number, got inf"),
    ("unlisted", math.nan, "must be a number from -inf to inf, got nan"),
])
def test_a_figure_out_of_its_range_is_named_with_its_unit(key: str, value: object, problem: str):
    assert figure_problem(key, value) == problem


# -- bounded_number: a marker's argument ----------------------------------------------------------------

def test_a_bounded_number_is_inside_its_closed_range_or_none():
    assert bounded_number(0, low=0, high=1) == 0.0 and bounded_number(1, low=0, high=1) == 1.0
    assert bounded_number(1.0000001, low=0, high=1) is None and bounded_number(-0.1, low=0, high=1) is None
    assert bounded_number(math.nan, low=0, high=1) is None
    assert bounded_number(10 ** 400, low=0, high=1e308) is None       # compared as an integer, no overflow
    assert bounded_number(True, low=0, high=1) is None and bounded_number("1", low=0, high=1) is None


def test_an_open_lower_end_refuses_the_end_itself():
    assert bounded_number(0, low=0, high=1, low_open=True) is None
    assert bounded_number(1e-9, low=0, high=1, low_open=True) == 1e-9
    assert bounded_number(1, low=0, high=1, low_open=True) == 1.0


@pytest.mark.parametrize("content", ["5", '"a run"', "null", "[]"])
def test_a_file_that_is_a_bare_json_value_is_one_line_not_a_traceback(tmp_path, content: str):
    from helpers import cli_in_process

    path = tmp_path / "run.json"
    path.write_text(content)
    done = cli_in_process("compare", str(path), str(path), check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("gpuenergy compare: error: ") and "not a pytest-gpuenergy run document" in done.stderr
