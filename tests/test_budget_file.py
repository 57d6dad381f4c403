"""gate/budget_file.py on its own: a budgets file read and checked line by line (every problem one line
naming the file and the line), budgets written from a run (each figure plus the margin, never below its
bound), the file's text, and how a written budget is rounded (four figures, never below its value).
In-process, so that mutation testing of the module sees them; the end-to-end use is in
tests/test_existing_suite.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpuenergy.errors import BudgetError, SettingError
from pytest_gpuenergy.gate.budget_file import (
    FileBudget,
    _round_up,
    budget_file_text,
    budgets_from_run,
    load_budget_file,
)
from pytest_gpuenergy.gate.budgets import Budget
from pytest_gpuenergy.gpu.specs import CapSpec


@pytest.mark.parametrize(("value", "written"), [
    (15.28, 15.28),                      # a round figure stays
    (15.2801, 15.29),                    # anything above goes up, never down
    (15.280000000000001, 15.29),         # float noise above a round figure: still never below the value
    (12345.6, 12350.0),
    (12340.0, 12340.0),                  # a round figure of five digits stays too
    (12340.000000000002, 12350.0),       # and float noise above it goes one step up, never down
    (0.0012344, 0.001235),
    (1234567.0, 1235000.0),
])
def test_a_budget_is_rounded_up_to_four_figures_and_never_below_its_value(value: float, written: float) -> None:
    assert _round_up(value) == written and _round_up(value) >= value


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf")])
def test_values_without_four_figures_are_left_alone(value: float) -> None:
    assert _round_up(value) == value


# -- reading a budgets file ------------------------------------------------------------------------

HEAD = 'format = "pytest-gpuenergy-budgets"\nversion = 2\n'
GPU = "NVIDIA H100 80GB HBM3"


def budgets_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "budgets.toml"
    path.write_text(text)
    return path


def refusal(tmp_path: Path, text: str) -> str:
    """The one-line error ``load_budget_file`` gives for a file of ``text``."""
    with pytest.raises(SettingError) as caught:
        load_budget_file(budgets_file(tmp_path, text))
    return str(caught.value)


def table(*lines: str) -> str:
    return "\n[[budget]]\n" + "".join(f"{line}\n" for line in lines)


A_TABLE = table('test = "t.py::test_a"', f'gpu = "{GPU}"', "ets_j = 1.0")      # lines 4-7 after HEAD


def test_a_file_gives_each_test_its_budgets_with_where_they_stand(tmp_path):
    path = budgets_file(tmp_path, "# written by gpuenergy budgets\n" + HEAD + table(
        'test = "t.py::test_a"', f'gpu = "{GPU}"', 'cap = "60%"', "ets_j = 12.5", "edp_js = 4", "time_s = 0.5",
    ) + table('test = "t.py::test_a"', f'gpu = "{GPU}"', "ets_j = 1e15") + table(
        'test = "t.py::test_b"', f'gpu = "{GPU}"', "cap = 250", "time_s = 2"))
    loaded = load_budget_file(path)
    first = Budget(ets_j=12.5, edp_js=4.0, time_s=0.5, gpu=GPU, exact_gpu=True, cap=CapSpec("percent", 60.0),
                   source=f"{path}:5")
    second = Budget(ets_j=1e15, gpu=GPU, exact_gpu=True, source=f"{path}:13")
    third = Budget(time_s=2.0, gpu=GPU, exact_gpu=True, cap=CapSpec("watts", 250.0), source=f"{path}:18")
    assert loaded.path == path
    assert loaded.entries == [FileBudget("t.py::test_a", first, f"{path}:5"), FileBudget("t.py::test_a", second, f"{path}:13"),
                              FileBudget("t.py::test_b", third, f"{path}:18")]
    assert loaded.budgets_for("t.py::test_a") == [first, second]
    assert loaded.budgets_for("t.py::test_b") == [third]
    assert loaded.budgets_for("t.py::test_c") == []
    written_whole = (loaded.entries[0].budget.edp_js, loaded.entries[2].budget.time_s)     # 4 and 2 in the file
    assert all(type(figure) is float for figure in written_whole)


def test_a_file_with_no_budget_is_valid_and_empty(tmp_path):
    assert load_budget_file(budgets_file(tmp_path, HEAD)).entries == []


def test_tables_are_found_however_their_header_is_spaced(tmp_path):
    path = budgets_file(tmp_path, HEAD + "\n  [[ budget ]]\n" + 'test = "t.py::test_a"\n' + f'gpu = "{GPU}"\n'
                        + "ets_j = -1\n")
    assert refusal(tmp_path, path.read_text()).startswith(f"{path}:7: ets_j must be a positive number")
    assert load_budget_file(budgets_file(tmp_path, HEAD + "\n\t[[budget ]]\n" + A_TABLE.split("\n", 2)[2])).entries[0].where \
        == f"{path}:4"


def test_budgets_whose_tests_were_not_collected_from_a_collected_file_are_stale(tmp_path):
    loaded = load_budget_file(budgets_file(tmp_path, HEAD + "".join(
        table(f'test = "{test}"', f'gpu = "{GPU}"', "ets_j = 1.0")
        for test in ("a.py::test_1", "a.py::TestX::test_2", "b.py::test_3", "a.py::test_4"))))
    stale = loaded.unknown_tests(["a.py::test_1", "a.py::test_4", "c.py::test_5"], ["a.py", "c.py"])
    assert [e.test for e in stale] == ["a.py::TestX::test_2"]          # b.py was not collected: no reason
    assert [e.test for e in loaded.unknown_tests(iter(["a.py::test_1"]), iter(["a.py", "b.py"]))] == [
        "a.py::TestX::test_2", "b.py::test_3", "a.py::test_4"]


def test_a_file_that_cannot_be_read_says_how_to_write_one(tmp_path):
    path = tmp_path / "missing.toml"
    with pytest.raises(SettingError) as caught:
        load_budget_file(path)
    assert str(caught.value) == (f"{path}: cannot read the budgets file: No such file or directory; write one with "
                                 f"`gpuenergy budgets --from RUN.json -o {path}`")


@pytest.mark.parametrize(("text", "says"), [
    ("format = [", ": not a TOML file: "),
    ('format = "pytest-gpuenergy-budgets"\nversion = 1\n', ": not a version 2 budgets file"),
    ('format = "gpuenergy-budgets"\nversion = 2\n', ": not a version 2 budgets file"),
    ("", ": not a version 2 budgets file"),
])
def test_a_file_that_is_no_budgets_file_is_refused(tmp_path, text, says):
    message = refusal(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'budgets.toml'}{says}")
    if "version" in says:
        assert message.endswith(": not a version 2 budgets file (format = 'pytest-gpuenergy-budgets', version = 2 "
                                "expected); write one with `gpuenergy budgets --from RUN.json`")


@pytest.mark.parametrize(("text", "line", "key"), [
    ("zzz = 1\n" + HEAD + "aaa = 2\n", 4, "aaa"),      # the first in order, at its own line
    (HEAD + '"team" = 1\n', 1, "team"),                 # a quoted key: its line is not looked for
])
def test_an_unknown_top_level_key_is_named_at_its_line(tmp_path, text, line, key):
    assert refusal(tmp_path, text) == (f"{tmp_path / 'budgets.toml'}:{line}: unknown key {key!r}; a budgets file has "
                                       f"format, version and [[budget]] tables")


@pytest.mark.parametrize("budget", ["budget = 5", '[budget]\ntest = "t.py::test_a"'])
def test_budgets_that_are_not_tables_of_an_array_are_refused(tmp_path, budget):
    assert refusal(tmp_path, HEAD + budget + "\n") == f"{tmp_path / 'budgets.toml'}: budget must be [[budget]] tables"


def test_an_array_of_budgets_written_inline_is_checked_at_the_top_of_the_file(tmp_path):
    path = tmp_path / "budgets.toml"
    assert refusal(tmp_path, HEAD + "budget = [1]\n") == f"{path}:1: a [[budget]] must be a table"
    inline = HEAD + f'budget = [{{test = "t.py::test_a", gpu = "{GPU}", ets_j = -1}}]\n'
    assert refusal(tmp_path, inline).startswith(f"{path}:1: ets_j must be a positive number, got -1")


@pytest.mark.parametrize(("lines", "line", "says"), [
    (('test = "t.py::test_a"', f'gpu = "{GPU}"', "ets_j = 1.0", "zeta = 1", "etz_j = 1"), 9,
     "unknown key 'etz_j' in [[budget]]; allowed: test, gpu, cap, ets_j, edp_js, time_s"),
    ((f'gpu = "{GPU}"', "ets_j = 1.0"), 4, "[[budget]] needs test = \"...\" (got None)"),
    (('test = 5', f'gpu = "{GPU}"', "ets_j = 1.0"), 5, "[[budget]] needs test = \"...\" (got 5)"),
    (('test = "t.py::test_a"', 'gpu = "  "', "ets_j = 1.0"), 6, "[[budget]] needs gpu = \"...\" (got '  ')"),
    (('test = "t.py::test_a"', "ets_j = 1.0"), 4, "[[budget]] needs gpu = \"...\" (got None)"),
    (('test = "t.py::test_a"', f'gpu = "{GPU}"'), 4, "[[budget]] needs at least one of ets_j, edp_js, time_s"),
    (('test = "t.py::test_a"', f'gpu = "{GPU}"', 'cap = "fast"', "ets_j = 1.0"), 7,
     "cap: 'fast' is not a cap; write watts (150), a percentage of the default limit (60%), or min, max, default"),
    (('test = "t.py::test_a"', f'gpu = "{GPU}"', '"ets_j" = -5'), 4, "ets_j must be a positive number, got -5"),
    ((f'gpu = """{GPU}', 'test = "t.py::test_a"', '"""', "ets_j = 1.0"), 4,       # inside a string: no key
     "[[budget]] needs test = \"...\" (got None)"),
])
def test_a_bad_budget_is_named_at_the_line_of_its_key(tmp_path, lines, line, says):
    """The line of the key where it is written plainly, else of the table's header."""
    assert refusal(tmp_path, HEAD + table(*lines)) == f"{tmp_path / 'budgets.toml'}:{line}: {says}"


@pytest.mark.parametrize("bad", [0, 1])
def test_a_key_is_looked_for_in_its_own_table_only(tmp_path, bad):
    """A key its line cannot be found for (quoted) is named at its table's header, never at the same
    key of a later table."""
    tables = [table(f'test = "t.py::test_{n}"', f'gpu = "{GPU}"', '"ets_j" = -5' if n == bad else "ets_j = 1.0")
              for n in range(3)]
    header = 4 + 5 * bad
    assert refusal(tmp_path, HEAD + "".join(tables)).startswith(f"{tmp_path / 'budgets.toml'}:{header}: ets_j must be ")


def test_a_budgets_file_is_read_as_utf_8_whatever_the_hosts_locale(tmp_path, monkeypatch):
    """A host whose locale is Latin-1 (simulated: text read without an encoding gets it) still reads
    the UTF-8 file ``gpuenergy budgets`` wrote."""
    read_text = Path.read_text

    def as_a_latin_1_host(self, encoding=None, errors=None):
        return read_text(self, encoding=encoding or "latin-1", errors=errors)

    path = budgets_file(tmp_path, HEAD + table('test = "t.py::test_a[\u00fc\u0394]"', f'gpu = "{GPU}"', "ets_j = 1.0"))
    monkeypatch.setattr(Path, "read_text", as_a_latin_1_host)
    assert [e.test for e in load_budget_file(path).entries] == ["t.py::test_a[\u00fc\u0394]"]


@pytest.mark.parametrize(("key", "value", "got"), [
    ("ets_j", "true", "True"), ("ets_j", '"5"', "'5'"), ("edp_js", "0", "0"), ("time_s", "-0.5", "-0.5"),
    ("ets_j", "1.0000001e15", "1000000100000000.0"), ("ets_j", "nan", "nan"), ("edp_js", "inf", "inf"),
])
def test_a_figure_must_be_a_positive_finite_number_up_to_the_budget_maximum(tmp_path, key, value, got):
    """Named at line 12, the second table's own line of the key (not the first table's ets_j)."""
    text = HEAD + A_TABLE + table('test = "t.py::test_b"', f'gpu = "{GPU}"', f"{key} = {value}")
    assert refusal(tmp_path, text) == f"{tmp_path / 'budgets.toml'}:12: {key} must be a positive number, got {got}"


def test_a_second_budget_for_a_test_model_and_cap_is_refused_naming_both(tmp_path):
    path = tmp_path / "budgets.toml"
    same_cap = HEAD + table('test = "t.py::test_a"', f'gpu = "{GPU}"', 'cap = "60%"', "ets_j = 1.0") \
        + table('test = "t.py::test_a"', f'gpu = "{GPU}"', 'cap = "60.0%"', "ets_j = 2.0")
    assert refusal(tmp_path, same_cap) == (f"{path}:10: a second budget for t.py::test_a on {GPU} at 60% "
                                           f"(the first is at {path}:4)")
    any_cap = HEAD + A_TABLE + A_TABLE.replace("1.0", "2.0")
    assert refusal(tmp_path, any_cap) == (f"{path}:9: a second budget for t.py::test_a on {GPU} at any cap "
                                          f"(the first is at {path}:4)")
    other_caps = HEAD + A_TABLE + A_TABLE.replace("ets_j", 'cap = "60%"\nets_j') \
        + A_TABLE.replace(GPU, "NVIDIA A100-SXM4-80GB")
    assert len(load_budget_file(budgets_file(tmp_path, other_caps)).entries) == 3


# -- writing one from a run ------------------------------------------------------------------------

def case(case_id: str, ets_j: float, time_s: float, edp_js: float, *, high_j: float | None = None, cap: str = "60%",
         clock_cap: str | None = None, passed: bool = True, gpu: str = GPU, enforced_w: float = 420.0) -> SimpleNamespace:
    """A run document's case as ``budgets_from_run`` reads it."""
    summary = SimpleNamespace(ets_j=ets_j, ets_high_j=high_j, time_s=time_s, edp_js=edp_js)
    return SimpleNamespace(case_id=case_id, summary=summary, cap=cap, clock_cap=clock_cap, passed=passed,
                           gpu_name=gpu, limit_enforced_w=enforced_w)


def test_a_budget_is_each_figure_plus_the_margin_never_below_the_top_of_its_bound():
    doc = SimpleNamespace(cases=[
        case("t.py::test_a[resnet-60%]", 8.0, 2.0, 16.0, high_j=9.0),      # the margin wins
        case("t.py::test_b[60%]", 8.0, 2.0, 16.0, high_j=12.0),            # the bound's top wins, for EDP too
        case("t.py::test_c[60%]", 8.0, 2.0, 16.0),                         # no bound: the figure itself
    ])
    assert budgets_from_run(doc, 0.25) == [
        {"test": "t.py::test_a[resnet]", "gpu": GPU, "cap": "60%", "ets_j": 10.0, "edp_js": 25.0, "time_s": 2.5},
        {"test": "t.py::test_b", "gpu": GPU, "cap": "60%", "ets_j": 12.0, "edp_js": 30.0, "time_s": 2.5},
        {"test": "t.py::test_c", "gpu": GPU, "cap": "60%", "ets_j": 10.0, "edp_js": 25.0, "time_s": 2.5},
    ]


def test_failed_cases_give_no_budget_and_a_current_cap_is_written_in_enforced_watts():
    doc = SimpleNamespace(cases=[
        case("t.py::test_x", 8.0, 2.0, 16.0, cap="current", enforced_w=312.5),
        case("t.py::test_y", 8.0, 2.0, 16.0, passed=False),
        case("t.py::test_z[60%-1200MHz]", 8.0, 2.0, 16.0, clock_cap="1200MHz"),
    ])
    assert [(b["test"], b["cap"]) for b in budgets_from_run(doc, 0.0)] == [("t.py::test_x", "312.5W"),
                                                                            ("t.py::test_z", "60%")]


def test_two_gpus_of_one_case_give_one_budget_with_the_larger_of_each_figure():
    doc = SimpleNamespace(cases=[case("t.py::test_a[60%]", 8.0, 2.0, 16.0), case("t.py::test_a[60%]", 4.0, 4.0, 20.0),
                                 case("t.py::test_a[60%]", 4.0, 1.0, 4.0, gpu="NVIDIA A100-SXM4-80GB")])
    assert budgets_from_run(doc, 0.25) == [
        {"test": "t.py::test_a", "gpu": "NVIDIA A100-SXM4-80GB", "cap": "60%", "ets_j": 5.0, "edp_js": 6.25, "time_s": 1.25},
        {"test": "t.py::test_a", "gpu": GPU, "cap": "60%", "ets_j": 10.0, "edp_js": 31.25, "time_s": 5.0},
    ]


@pytest.mark.parametrize("margin", [-0.01, 10.01])
def test_a_margin_outside_0_to_10_is_refused(margin):
    with pytest.raises(BudgetError) as caught:
        budgets_from_run(SimpleNamespace(cases=[]), margin)
    assert str(caught.value) == f"--margin={margin:g}: a margin is a share from 0 to 10 (0.1 or 10%)"


@pytest.mark.parametrize("margin", [0.0, 10.0])
def test_margins_at_the_ends_are_accepted(margin):
    [budget] = budgets_from_run(SimpleNamespace(cases=[case("t.py::test_a", 8.0, 2.0, 16.0)]), margin)
    assert budget["time_s"] == 2.0 * (1 + margin)


def test_a_written_file_says_where_it_came_from_and_lists_each_budgets_keys_in_order():
    entries = [{"time_s": 2.5, "ets_j": 10.0, "gpu": GPU, "test": 't.py::test_a["x"\\y]', "cap": "60%", "edp_js": 25},
               {"test": "t.py::test_b", "gpu": GPU, "ets_j": 1.5}]
    assert budget_file_text(entries, ["from run R", "margin 10%"]) == (
        "# from run R\n# margin 10%\n\n"
        'format = "pytest-gpuenergy-budgets"\nversion = 2\n\n'
        '[[budget]]\ntest = "t.py::test_a[\\"x\\"\\\\y]"\n'
        f'gpu = "{GPU}"\ncap = "60%"\nets_j = 10.0\nedp_js = 25.0\ntime_s = 2.5\n\n'
        f'[[budget]]\ntest = "t.py::test_b"\ngpu = "{GPU}"\nets_j = 1.5\n')


def test_a_written_file_reads_back_as_the_budgets_it_was_written_from(tmp_path):
    doc = SimpleNamespace(cases=[case('t.py::test_a["x"\\y-60%]', 8.0, 2.0, 16.0, high_j=9.0),
                                 case("t.py::test_b", 0.0123, 0.5, 0.00615, cap="current")])
    entries = budgets_from_run(doc, 0.1)
    path = budgets_file(tmp_path, budget_file_text(entries, ["from run R"]))
    loaded = load_budget_file(path)
    assert [(e.test, e.budget.gpu, e.budget.cap.label if e.budget.cap else None, e.budget.ets_j, e.budget.edp_js,
             e.budget.time_s) for e in loaded.entries] == [
        (e["test"], e["gpu"], e["cap"], e["ets_j"], e["edp_js"], e["time_s"]) for e in entries]
    assert loaded.entries[0].test == 't.py::test_a["x"\\y]'
