"""``gpuenergy table``: GPU models side by side, each at its default and at its best cap.

The figures each test expects are worked out here from the documents' own repetitions (means per
call), never read back from the table's code. Real runs come from pytest sessions on the simulator.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gpuenergy import fileio
from pytest_gpuenergy.cli import table as table_cli
from pytest_gpuenergy.errors import SettingError, StorageError
from pytest_gpuenergy.meter.results import DomainEnergy
from pytest_gpuenergy.reports.numbers import si
from pytest_gpuenergy.reports.table import (
    MIXED_WARNING,
    SIM_WARNING,
    build_table,
    table_html,
    table_lines,
    table_markdown,
)
from pytest_gpuenergy.runs.reader import load_document
from pytest_gpuenergy.runs.records import RunDocument
from pytest_gpuenergy.runs.store import RunStore

from helpers import H100, H100_REAL, V100, cli_in_process, declared_suite, make_doc

MI300X = "AMD Instinct MI300X (simulated)"

TRAIN = "tests/test_suite.py::test_train[alexnet-train]"
INFER = "tests/test_suite.py::test_train[vgg-infer]"


def flat(text: str) -> str:
    """Output with its wrapping undone, for phrases that a narrow terminal breaks over lines."""
    return " ".join(text.split())


def mean_ets(doc: RunDocument, case_id: str) -> float:
    """A case's ETS per call as the repetitions give it: what the table must show."""
    (entry,) = [e for e in doc.cases if e.case_id == case_id]
    return statistics.fmean(rep.ets_j for rep in entry.repetitions)


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore(tmp_path / ".energy")


# -- the best setting, the default, the saving ---------------------------------------------------------

def test_the_best_cap_is_the_least_ets_not_the_lowest_cap_and_the_saving_is_against_the_default_limit():
    # Energy falls with the cap in the DVFS model; the 200 W case made 40 % dearer puts the least ETS at 300 W.
    doc = make_doc(seed=1, scale={"tests/test_suite.py::test_train[alexnet-train-200W]": 1.4})
    table = build_table([doc])
    row = next(r for r in table.rows if r.workload == TRAIN)
    ets = {cap: mean_ets(doc, f"tests/test_suite.py::test_train[alexnet-train-{cap}]") for cap in ("200W", "300W", "700W")}
    assert ets["300W"] < ets["200W"] and min(ets.values()) == ets["300W"]
    assert (row.best.cap, row.default.cap, row.default_measured) == ("300W", "700W", True)
    assert row.best.ets_j == pytest.approx(ets["300W"], rel=1e-12)
    assert row.default.ets_j == pytest.approx(ets["700W"], rel=1e-12)
    assert row.saving_pct == pytest.approx(100 * (1 - ets["300W"] / ets["700W"]), rel=1e-9)
    assert 20 < row.saving_pct < 50            # the model's shape: about a third less at 300 W of 700 W


def test_t_and_edp_are_shown_at_the_same_two_settings_as_the_ets():
    doc = make_doc(seed=2, workloads=("alexnet-train",))
    (row,) = build_table([doc]).rows
    (best,) = [e for e in doc.cases if e.cap == row.best.cap]
    (default,) = [e for e in doc.cases if e.cap == row.default.cap]
    assert row.best.time_s == pytest.approx(statistics.fmean(r.time_s for r in best.repetitions))
    assert row.best.edp_js == pytest.approx(statistics.fmean(r.ets_j * r.time_s for r in best.repetitions))
    assert row.default.time_s == pytest.approx(statistics.fmean(r.time_s for r in default.repetitions))
    assert row.default.edp_js == pytest.approx(statistics.fmean(r.ets_j * r.time_s for r in default.repetitions))
    assert row.best.time_s > row.default.time_s       # a lower cap costs time


def test_caps_in_percent_find_the_default_at_100_percent_whatever_their_order():
    doc = make_doc(seed=3, workloads=("alexnet-train",), caps_w=(700.0, 280.0, 420.0), percent=True)
    (row,) = build_table([doc]).rows
    assert (row.default.cap, row.default.limit_w, row.default_measured) == ("100%", 700.0, True)
    assert row.best.cap == "40%"


def test_without_the_default_limit_measured_the_highest_cap_stands_in_and_every_report_says_so():
    doc = make_doc(seed=4, workloads=("alexnet-train",), caps_w=(200.0, 300.0, 400.0))
    table = build_table([doc])
    (row,) = table.rows
    assert (row.default.cap, row.default_measured) == ("400W", False)
    assert row.saving_pct == pytest.approx(100 * (1 - mean_ets(doc, "tests/test_suite.py::test_train[alexnet-train-200W]")
                                                  / mean_ets(doc, "tests/test_suite.py::test_train[alexnet-train-400W]")))
    assert "highest 400W†" in "\n".join(table_lines(table, 80))
    for text in (table_markdown(table), table_html(table), "\n".join(table_lines(table, 80))):
        assert "the default limit was not measured" in flat(text)


def test_a_workload_run_at_one_cap_has_no_saving_and_its_best_is_its_default():
    doc = make_doc(seed=5, workloads=("alexnet-train",), caps_w=(700.0,))
    table = build_table([doc])
    (row,) = table.rows
    assert row.best == row.default and row.saving_pct == 0.0
    assert table.winners == () and "most efficient" not in "\n".join(table_lines(table, 80))   # one device: no one to beat


# -- the most efficient device -----------------------------------------------------------------------

def test_the_most_efficient_device_has_the_least_ets_at_its_best_even_when_another_is_less_at_default():
    # H100: 500 J at 700 W, least at 200 W (~332 J); V100 at 0.9x: 450 J at 300 W but ~344 J at its best, 150 W.
    h100 = make_doc(seed=6, workloads=("alexnet-train",), noise=0.005)
    v100 = make_doc(seed=7, workloads=("alexnet-train",), gpu_name=V100, caps_w=(150.0, 300.0), noise=0.005,
                    scale={"alexnet-train": 0.9})
    table = build_table([h100, v100])
    rows = {r.device.name: r for r in table.rows}
    assert rows[V100].default.ets_j < rows[H100].default.ets_j          # V100 is less at its default ...
    assert rows[H100].best.ets_j < rows[V100].best.ets_j                # ... H100 at its best
    assert table.is_winner(rows[H100]) and not table.is_winner(rows[V100])
    (winner,) = table.winners
    assert winner.runner_up is rows[V100] and winner.beyond_noise is True
    assert winner.ahead_pct == pytest.approx(100 * (1 - rows[H100].best.ets_j / rows[V100].best.ets_j))
    out = "\n".join(table_lines(table, 80))
    assert f"most efficient (simulated): H100 80GB HBM3 (sim) at 200 W, {winner.ahead_pct:.1f} % less ETS than " \
           f"Tesla V100-SXM2-32GB (sim) (beyond the noise)" in flat(out)
    marked = [line for line in out.splitlines() if line.startswith("* ")]
    assert len(marked) == 1 and "H100" in marked[0]


def test_devices_within_each_others_noise_are_said_to_be_so():
    h100 = make_doc(seed=8, workloads=("alexnet-train",), caps_w=(700.0,), noise=0.2, n=3)
    other = make_doc(seed=9, workloads=("alexnet-train",), caps_w=(700.0,), noise=0.2, n=3,
                     gpu_name="NVIDIA A100-SXM4-40GB (simulated)")
    (winner,) = build_table([h100, other]).winners
    assert winner.beyond_noise is False and "within the noise" in winner.describe()


def test_simulated_and_measured_devices_are_never_ranked_together_and_the_mix_is_said_loudly():
    real = make_doc(seed=10, backend="nvml", gpu_name=H100_REAL, workloads=("alexnet-train",))
    sim_h100 = make_doc(seed=11, workloads=("alexnet-train",), scale={"alexnet-train": 0.5})
    sim_v100 = make_doc(seed=12, workloads=("alexnet-train",), gpu_name=V100, caps_w=(150.0, 300.0))
    table = build_table([real, sim_h100, sim_v100])
    assert table.mixed
    rows = {r.device.name: r for r in table.rows}
    assert rows[H100].best.ets_j < rows[H100_REAL].best.ets_j              # the simulated one reads less ...
    assert not table.is_winner(rows[H100_REAL]) and table.is_winner(rows[H100])   # ... and wins only among its own
    (winner,) = table.winners
    assert winner.runner_up is rows[V100]
    assert rows[H100_REAL].device.label == "H100 80GB HBM3" and rows[H100].device.label == "H100 80GB HBM3 (sim)"
    for text in (flat("\n".join(table_lines(table, 80))), table_markdown(table), table_html(table)):
        assert flat(MIXED_WARNING) in text
        assert "figures from the GPU simulator, not measured on a real GPU" in text
    assert "MIXED" in table.title()


def test_an_all_simulated_table_says_so_in_its_title_banner_and_footer():
    table = build_table([make_doc(seed=13)])
    for text in (flat("\n".join(table_lines(table, 80))), table_markdown(table), table_html(table)):
        assert flat(SIM_WARNING) in text and "(simulated)" in text and "MIXED" not in text
    measured = build_table([make_doc(seed=14, backend="nvml", gpu_name=H100_REAL)])
    for text in (flat("\n".join(table_lines(measured, 80))), table_markdown(measured), table_html(measured)):
        assert "simulat" not in text.lower()


# -- devices: several models in one document, several GPUs in one case -------------------------------

def test_a_mixed_machines_document_is_split_by_model_as_two_documents_would_be():
    h100 = make_doc(seed=15)
    v100 = make_doc(seed=16, gpu_name=V100, caps_w=(150.0, 300.0))
    mixed = replace(h100, cases=h100.cases + v100.cases)
    one, two = build_table([mixed]), build_table([h100, v100])
    assert [(r.workload, r.device.name, r.best, r.default, r.saving_pct) for r in one.rows] == \
           [(r.workload, r.device.name, r.best, r.default, r.saving_pct) for r in two.rows]
    assert len(one.devices) == 2 and len(one.winners) == 2


def test_a_case_on_two_gpus_of_one_model_adds_their_energy_and_takes_the_longer_time():
    doc = make_doc(seed=17, workloads=("alexnet-train",), caps_w=(700.0,))
    (entry,) = doc.cases
    second = replace(entry, gpu_slot=1, gpu_index=1,
                     repetitions=tuple(replace(r, ets_j=2 * r.ets_j, time_s=1.5 * r.time_s, ets_low_j=None, ets_high_j=None)
                                       for r in entry.repetitions))
    (row,) = build_table([replace(doc, cases=(entry, second))]).rows
    assert row.device.gpus == 2 and row.device.label.startswith("2x H100")
    assert row.default.ets_j == pytest.approx(3 * mean_ets(doc, entry.case_id))
    assert row.default.time_s == pytest.approx(1.5 * statistics.fmean(r.time_s for r in entry.repetitions))


def test_workloads_only_some_devices_ran_are_noted_and_clock_capped_cases_left_out_with_a_note():
    h100 = make_doc(seed=18, workloads=("alexnet-train", "vgg-infer"))
    v100 = make_doc(seed=19, workloads=("alexnet-train",), gpu_name=V100, caps_w=(150.0, 300.0))
    clocked = replace(v100.cases[0], case_id=v100.cases[0].case_id + "#2", clock_cap="clk50%", sm_clock_cap_mhz=700.0)
    table = build_table([h100, replace(v100, cases=v100.cases + (clocked,))])
    assert {r.workload for r in table.rows if r.device.name == V100} == {TRAIN}
    assert "vgg-infer: not in the run of Tesla V100-SXM2-32GB (sim)" in table.notes
    assert any("1 case under an SM clock cap left out" in n for n in table.notes)
    assert [w.workload for w in table.winners] == [TRAIN]          # one device ran vgg-infer: no one to beat


# -- bad input ------------------------------------------------------------------------------------------

def test_two_runs_of_one_model_are_refused_naming_both_files_and_the_newer(store):
    older, newer = store.save(make_doc(seed=20, minutes=0)), store.save(make_doc(seed=21, minutes=10))
    with pytest.raises(SettingError) as caught:
        build_table([load_document(older), load_document(newer)])
    message = str(caught.value)
    assert f"{older} and {newer} both hold runs of H100 80GB HBM3 (sim)" in message
    assert f"name one of them (the newer is {newer})" in message and "\n" not in message


def test_one_run_given_twice_and_runs_without_results_are_refused(store):
    path = store.save(make_doc(seed=22))
    with pytest.raises(SettingError, match="is given twice"):
        build_table([load_document(path), load_document(path)])
    empty = replace(make_doc(seed=23), cases=())
    with pytest.raises(StorageError, match="has no results .* name a run saved by pytest --energy-save"):
        build_table([empty])
    doc = make_doc(seed=24)
    failed = replace(doc, cases=tuple(replace(c, outcome="failed") for c in doc.cases))
    with pytest.raises(StorageError, match=f"no passed case \\(its {len(doc.cases)} cases failed"):
        build_table([failed])


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read the run document: No such file or directory"),
    ('{"format": "pytest-benchmark"}', "not a pytest-gpuenergy run document (\"format\" is 'pytest-benchmark'"),
    ("{", "corrupt run document"),
])
def test_a_file_that_is_not_a_run_is_a_one_line_error_naming_it(tmp_path, store, content, message):
    good = store.save(make_doc(seed=25))
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    done = cli_in_process("table", str(good), str(bad), check=False)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"gpuenergy table: error: {bad}: ") and message in line


def test_same_model_twice_through_the_command_exits_2_with_one_line(store):
    a, b = store.save(make_doc(seed=26)), store.save(make_doc(seed=27, minutes=5))
    done = cli_in_process("table", str(a), str(b), check=False)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "both hold runs of" in done.stderr


# -- the reports ----------------------------------------------------------------------------------------

def test_the_terminal_table_fits_80_columns_with_long_names(store, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    long = "a-very-long-workload-name-with-many-parameters-" * 3
    paths = [store.save(make_doc(seed=28, workloads=(long, "vgg-infer"))),
             store.save(make_doc(seed=29, workloads=(long, "vgg-infer"), gpu_name=MI300X))]
    assert table_cli.cmd_table(table_cli_args(paths)) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines() if "/" not in line) <= 80
    assert "MI300X" in out and "AMD" in out and "default 700W" in out and "best 200W" in out


def table_cli_args(paths, markdown=None, html=None):
    from argparse import Namespace

    return Namespace(runs=[str(p) for p in paths], markdown=markdown, html=html)


def test_markdown_and_html_are_written_whole_and_a_failed_write_leaves_the_old_file(store, tmp_path, monkeypatch):
    paths = [store.save(make_doc(seed=30)), store.save(make_doc(seed=31, gpu_name=V100, caps_w=(150.0, 300.0)))]
    md, page = tmp_path / "out" / "table.md", tmp_path / "out" / "table.html"
    done = cli_in_process("table", *map(str, paths), "--markdown", str(md), "--html", str(page))
    assert f"wrote {md}" in done.stdout and f"wrote {page}" in done.stdout
    text = md.read_text()
    assert text.startswith("## Energy across devices: 2 workloads on 2 GPU models (simulated)")
    assert "| `alexnet-train` | H100 80GB HBM3 (sim) | NVIDIA | 700W (700 W) |" in text
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>") and "<script" not in html
    assert "Tesla V100-SXM2-32GB (sim)" in html and 'class="sim"' in html

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "replace", full_disk)
    failed = cli_in_process("table", *map(str, paths), "--markdown", str(md), check=False)
    assert failed.returncode == 2
    assert failed.stderr.strip() == (f"gpuenergy table: error: cannot write {md}: No space left on device; "
                                     f"check the folder exists and is writable")
    assert md.read_text() == text and sorted(p.name for p in md.parent.iterdir()) == ["table.html", "table.md"]


def test_a_report_on_standard_output_is_the_whole_output(store):
    path = store.save(make_doc(seed=32))
    done = cli_in_process("table", str(path), "--markdown", "-")
    assert done.stdout.startswith("## Energy across devices") and "workload alexnet-train" not in done.stdout
    done = cli_in_process("table", str(path), "--html", "-", "--markdown", str(path.parent / "t.md"))
    assert done.stdout.startswith("<!DOCTYPE html>") and f"wrote {path.parent / 't.md'}" in done.stderr


def test_markdown_cells_cannot_break_the_table():
    doc = make_doc(seed=33, workloads=("a|b",), caps_w=(700.0,))
    text = table_markdown(build_table([doc]))
    row = next(line for line in text.splitlines() if line.startswith("| `"))
    assert row.count(" | ") == 12          # 13 cells: the pipe in the name is escaped


def test_the_help_reads_at_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    done = cli_in_process("table", "--help", check=False)
    assert done.returncode == 0 and max(map(len, done.stdout.splitlines())) <= 80
    assert "--markdown FILE" in done.stdout and "RUN.json" in done.stdout


# -- end to end: real runs on the simulator -------------------------------------------------------------

@pytest.mark.slow
def test_real_h100_v100_and_mi300x_runs_are_set_side_by_side(pytester, monkeypatch):
    pytester.makepyfile(test_suite=declared_suite(4e12))
    for model in ("H100", "V100", "MI300X"):
        monkeypatch.setenv("GPUENERGY_SIM_GPUS", model)
        pytester.runpytest("--gpu-caps=60%,100%", "--energy-repeat=3", "--energy-save",
                           "--energy-domains=gpu,cpu,dram").assert_outcomes(passed=4)
    paths = sorted((pytester.path / ".energy").glob("sim/*/*.json"))
    assert len(paths) == 3
    monkeypatch.setenv("COLUMNS", "80")
    done = cli_in_process("table", *map(str, paths), "--markdown", str(pytester.path / "t.md"))
    out, markdown = done.stdout, (pytester.path / "t.md").read_text()
    assert max(len(line) for line in out.splitlines() if "/" not in line) <= 80
    docs = {load_document(p).gpu_model: load_document(p) for p in paths}
    assert set(docs) == {H100, V100, MI300X}
    best: dict[str, dict[str, float]] = {}
    for model, doc in docs.items():
        vendor = "AMD" if model == MI300X else "NVIDIA"
        label = model.removeprefix("NVIDIA ").removeprefix("AMD ").replace(" (simulated)", " (sim)")
        for test in ("test_train", "test_infer"):
            at = {cap: mean_ets(doc, f"test_suite.py::{test}[{cap}]") for cap in ("60%", "100%")}
            saving = 100 * (1 - at["60%"] / at["100%"])
            assert at["60%"] < at["100%"] and 5 < saving < 40      # the simulator's DVFS: a 60 % cap saves energy
            assert f"| `{test}` | {label} | {vendor} | 100% ({doc.cases[0].default_limit_w:g} W) |" in markdown
            assert f"{saving:.1f}% |" in markdown
            best.setdefault(test, {})[label] = at["60%"]
            (host,) = [e for e in doc.cases if e.case_id == f"test_suite.py::{test}[100%]"]
            assert f"| `{test}` | ↳ host CPU (sim) |  | 100% ({host.default_limit_w:g} W) | " \
                   f"{si(host.per_domain['cpu'].ets_j, 'J')} |" in markdown
    for test, figures in best.items():
        ranked = sorted(figures, key=figures.__getitem__)
        lead = 100 * (1 - figures[ranked[0]] / figures[ranked[1]])
        block = flat(out.split(f"workload {test}\n")[1].split("workload ")[0])
        assert f"most efficient (simulated): {ranked[0]} at 60% (" in block
        assert f"{lead:.1f} % less ETS than {ranked[1]}" in block
    assert any("Instinct MI300X (sim)" in line and " AMD " in line for line in out.splitlines())
    assert flat(SIM_WARNING) in flat(out)


@pytest.mark.slow
def test_a_mixed_h100_and_mi300x_machine_gives_one_table_of_both(pytester, monkeypatch):
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,MI300X")
    pytester.makepyfile(test_suite=declared_suite(4e12).replace("@pytest.mark.energy(", '@pytest.mark.energy(gpus="all", '))
    pytester.runpytest("--gpu-caps=60%,100%", "--energy-repeat=2", "--energy-save").assert_outcomes(passed=4)
    paths = sorted((pytester.path / ".energy").glob("sim/*/*.json"))
    table = build_table([load_document(p) for p in paths])
    assert {d.label for d in table.devices} == {"H100 80GB HBM3 (sim)", "Instinct MI300X (sim)"}
    assert {d.vendor for d in table.devices} == {"NVIDIA", "AMD"}
    assert len(table.rows) == 4 and len(table.winners) == 2


# -- the host's domains and the node's total (--energy-domains) -------------------------------------------

HOST_W = {"cpu": 400.0, "dram": 60.0}      # a busy host: the longer a capped GPU works, the more it draws


def with_domains(doc: RunDocument, *, host_simulated: bool = True) -> RunDocument:
    """``doc`` as if saved with --energy-domains=gpu,cpu,dram: each case's host draws HOST_W over its T."""
    cases = []
    for entry in doc.cases:
        time_s = statistics.fmean(r.time_s for r in entry.repetitions)
        gpu_j = statistics.fmean(r.ets_j for r in entry.repetitions)
        parts = {"gpu": gpu_j, **{domain: watts * time_s for domain, watts in HOST_W.items()}}
        figures = {domain: DomainEnergy(j, 0.99 * j, 1.01 * j, host_simulated if domain != "gpu" else entry.simulated)
                   for domain, j in parts.items()}
        total = sum(parts.values())
        figures["node"] = DomainEnergy(total, 0.99 * total, 1.01 * total, host_simulated or entry.simulated)
        cases.append(replace(entry, per_domain=figures))
    return replace(doc, cases=tuple(cases))


def node_j(doc: RunDocument, cap: str, workload: str = "alexnet-train") -> float:
    (entry,) = [e for e in doc.cases if e.case_id == f"tests/test_suite.py::test_train[{workload}-{cap}]"]
    return entry.per_domain["node"].ets_j


def test_the_hosts_domains_are_shown_at_the_gpus_two_settings_and_the_node_at_its_own_best_cap():
    doc = with_domains(make_doc(seed=40, workloads=("alexnet-train",)))
    table = build_table([doc])
    (row,) = table.rows
    cpu, dram, node = row.domains
    assert (cpu.domain, dram.domain, node.domain) == ("cpu", "dram", "node")
    (default,) = [e for e in doc.cases if e.cap == row.default.cap]
    (best,) = [e for e in doc.cases if e.cap == row.best.cap]
    assert (cpu.default_ets_j, cpu.best_ets_j) == (default.per_domain["cpu"].ets_j, best.per_domain["cpu"].ets_j)
    assert cpu.saving_pct < 0 and cpu.best_cap is None        # the capped GPU works longer: the host draws more
    at = {cap: node_j(doc, cap) for cap in ("200W", "300W", "400W", "500W", "700W")}
    assert row.best.cap == "200W" and min(at, key=at.__getitem__) != "200W"   # the node's best is another cap
    assert node.best_cap == min(at, key=at.__getitem__) and node.best_ets_j == min(at.values())
    assert node.saving_pct == pytest.approx(100 * (1 - min(at.values()) / at["700W"]))
    out = "\n".join(table_lines(table, 80))
    assert max(len(line) for line in out.splitlines() if "/" not in line) <= 80
    assert "↳ host CPU (sim)" in out and f"best {node.best_cap}" in out
    assert "| ↳ node total (sim) |" in table_markdown(table) and "host CPU, host DRAM" in flat(table_html(table))


def test_runs_without_domains_show_the_gpus_alone_and_the_node_lead_needs_every_device():
    plain = make_doc(seed=41, workloads=("alexnet-train",), noise=0.001)
    assert all(row.domains == () for row in build_table([plain]).rows)
    # The V100's node total is less at its default limit and more at its best than the H100's.
    v100 = with_domains(make_doc(seed=42, workloads=("alexnet-train",), gpu_name=V100, caps_w=(150.0, 300.0),
                                 noise=0.001, scale={"alexnet-train": 0.99}))
    assert build_table([plain, v100]).node_leads == ()                # the H100's run has no node figure
    h100 = with_domains(plain)
    table = build_table([h100, v100])
    ((workload, text),) = table.node_leads
    h100_node = min(node_j(h100, cap) for cap in ("200W", "300W", "400W", "500W", "700W"))
    v100_node = min(node_j(v100, cap) for cap in ("150W", "300W"))
    assert node_j(v100, "300W") < node_j(h100, "700W") and h100_node < v100_node
    assert workload == TRAIN
    assert text.startswith("least node total (GPU, CPU and DRAM, simulated): H100 80GB HBM3 (sim) at 500W, ")
    assert f"{100 * (1 - h100_node / v100_node):.1f} % less than Tesla V100-SXM2-32GB (sim)" in text


def test_a_measured_gpu_with_a_simulated_host_is_a_mixed_table():
    doc = with_domains(make_doc(seed=43, backend="nvml", gpu_name=H100_REAL), host_simulated=True)
    table = build_table([doc])
    assert table.mixed and flat(MIXED_WARNING) in flat("\n".join(table_lines(table, 80)))


def test_the_vendor_comes_from_the_runs_machine_then_its_library_then_the_gpus_name():
    from pytest_gpuenergy.reports.table import vendor_of

    doc = make_doc(seed=44)
    named = replace(doc, machine={**doc.machine, "gpus": [{**doc.machine["gpus"][0], "vendor": "amd"}]})
    assert vendor_of(H100, "sim", named) == "AMD"                   # what the machine recorded wins
    assert vendor_of("Some GPU", "amdsmi", doc) == "AMD" and vendor_of("Some GPU", "nvml", doc) == "NVIDIA"
    assert vendor_of("AMD Instinct MI210 (simulated)", "sim", doc) == "AMD"
    assert vendor_of(V100, "sim", doc) == "NVIDIA" and vendor_of("Some GPU", "sim", doc) == "-"
