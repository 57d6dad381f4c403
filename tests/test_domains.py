"""``--energy-domains=gpu,cpu,dram`` end to end: per_domain in results and run documents, budgets by
domain, and a powercap tree that is missing or unreadable said in one line before any test runs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_gpuenergy.errors import BudgetError, StorageError
from pytest_gpuenergy.gate.budgets import budget_from_marker
from pytest_gpuenergy.host.recorder import HostFigure
from pytest_gpuenergy.meter.domains import merge_domains, per_domain
from pytest_gpuenergy.meter.results import DomainEnergy, EnergyResult, GpuResult, Repetition
from pytest_gpuenergy.plugin.options import parse_domains
from pytest_gpuenergy.runs.records import RunDocument
from pytest_gpuenergy.sim.powercap import HostModel

WORK = '{"flops_tf32": 4e13, "bytes": 1e10, "kernels": 100}'


def suite(budget: str = "") -> str:
    return textwrap.dedent(f"""
        import pytest

        def step():
            pass

        {budget}
        @pytest.mark.energy(work={WORK})
        def test_train(energy_meter):
            energy_meter.measure(step, warmup=1, min_time_s=0.5)
            result = energy_meter.result
            print("PER_DOMAIN", {{d: round(f.ets_j, 6) for d, f in result.per_domain.items()}})
    """)


def saved_cases(pytester: pytest.Pytester) -> list[dict]:
    [path] = (pytester.path / ".energy").rglob("*.json")
    return json.loads(path.read_text())["cases"]


def test_gpu_cpu_and_dram_give_per_domain_figures_and_the_nodes_total_in_the_run_document(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=suite())
    result = pytester.runpytest("--energy-domains=gpu,cpu,dram", "--energy-save", "-s")
    result.assert_outcomes(passed=1)
    [case] = saved_cases(pytester)
    domains = case["per_domain"]
    assert list(domains) == ["gpu", "cpu", "dram", "node"]
    for figure in domains.values():
        assert figure["ets_low_j"] <= figure["ets_j"] <= figure["ets_high_j"]
        assert figure["simulated"] is True
    assert domains["gpu"]["ets_j"] == pytest.approx(case["summary"]["ets_j"])
    assert domains["node"]["ets_j"] == pytest.approx(sum(domains[d]["ets_j"] for d in ("gpu", "cpu", "dram")))
    # the simulated host worked through every call: two packages at idle + active power for T
    host = HostModel()
    time_s = case["summary"]["time_s"]
    assert domains["cpu"]["ets_j"] == pytest.approx(2 * (host.package_idle_w + host.package_active_w) * time_s, rel=0.02)
    assert domains["dram"]["ets_j"] == pytest.approx(2 * (host.dram_idle_w + host.dram_active_w) * time_s, rel=0.02)
    result.stdout.fnmatch_lines(["*ETS per call by domain*", "*test_train* gpu * J, cpu * J, dram * J, node * J*"])


@pytest.mark.sim_gpus("H100,H100")
def test_a_case_on_two_gpus_prints_its_domain_line_once(pytester: pytest.Pytester) -> None:
    """Each GPU of a case has a row of its own; the case's domains (the GPUs' total and the host's) are
    one line: the terminal once gave every GPU slot 0 and printed the line once per GPU."""
    pytester.makepyfile(test_work=suite().replace("@pytest.mark.energy(", "@pytest.mark.energy(gpus=2, "))
    result = pytester.runpytest("--energy-domains=gpu,cpu,dram")
    result.assert_outcomes(passed=1)
    rows = [line for line in result.outlines if line.startswith("test_train ")]
    assert len(rows) == 2, result.outlines       # a row per GPU
    domain_lines = [line for line in result.outlines if "test_train" in line and "node" in line]
    assert len(domain_lines) == 1, result.outlines


@pytest.mark.slow
def test_pytest_xdist_workers_hand_per_domain_to_the_controller(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=suite())
    result = pytester.runpytest_subprocess("-n", "2", "--energy-domains=gpu,cpu,dram", "--energy-save")
    result.assert_outcomes(passed=1)
    [case] = saved_cases(pytester)
    assert list(case["per_domain"]) == ["gpu", "cpu", "dram", "node"]
    result.stdout.fnmatch_lines(["*test_train* gpu * J, cpu * J, dram * J, node * J*"])


def test_the_figures_repeat_and_only_the_domains_asked_for_are_measured(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=suite())
    first = pytester.runpytest("--energy-domains=gpu,cpu", "-s")
    second = pytester.runpytest("--energy-domains=cpu,gpu", "-s")
    lines = [[line for line in run.outlines if "PER_DOMAIN" in line] for run in (first, second)]
    assert lines[0] == lines[1] and len(lines[0]) == 1
    assert "'cpu'" in lines[0][0] and "'dram'" not in lines[0][0]
    plain = pytester.runpytest("-s")
    assert any("PER_DOMAIN {}" in line for line in plain.outlines)      # the GPUs alone: no per_domain


@pytest.mark.parametrize(("budget_j", "fails"), [(1.0, True), (1e6, False)])
def test_a_node_budget_fails_the_test_when_the_nodes_total_exceeds_it(
        pytester: pytest.Pytester, budget_j: float, fails: bool) -> None:
    pytester.makepyfile(test_work=suite(f'@pytest.mark.energy_budget(ets={budget_j}, domain="node")'))
    result = pytester.runpytest("--energy-domains=gpu,cpu,dram")
    if fails:
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(["*energy budget exceeded at cap current: node ETS * J > budget 1 J (+*%) "
                                     "(true node ETS within *-* J; simulated, n=1)*"])
        result.stdout.no_fnmatch_line("*on GPU 0*")         # a node budget is not each GPU's
    else:
        result.assert_outcomes(passed=1)


def test_a_cpu_budget_without_the_host_measured_says_how_to_measure_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=suite('@pytest.mark.energy_budget(ets=5.0, domain="cpu")'))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*energy_budget(ets=5, domain='cpu'): the cpu energy was not measured; "
                                 "run with --energy-domains=gpu,cpu,dram*"])


def test_an_unreadable_counter_is_one_line_before_any_test(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUENERGY_SIM_POWERCAP_FAULT", "unreadable")
    pytester.makepyfile(test_work=suite())
    result = pytester.runpytest("--energy-domains=gpu,cpu,dram")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [line for line in result.errlines if "energy_uj" in line]
    assert "permission denied: since Linux 5.10" in line and "sudo chmod a+r" in line
    assert "Traceback" not in result.stderr.str() and "Traceback" not in result.stdout.str()


def test_no_powercap_tree_is_one_line_before_any_test(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUENERGY_POWERCAP_ROOT", str(pytester.path / "no-such-tree"))
    pytester.makepyfile(test_work=suite())
    result = pytester.runpytest("--energy-domains=gpu,dram")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: no Linux powercap tree at */no-such-tree *drop cpu,dram from --energy-domains*"])
    assert "Traceback" not in result.stderr.str()


def test_a_real_tree_beside_the_simulated_gpus_is_read_on_the_hosts_clock(pytester: pytest.Pytester,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """GPUENERGY_POWERCAP_ROOT wins over the simulated tree: a frozen copy of a tree reads 0 J, not simulated."""
    root = pytester.path / "powercap"
    for folder, name in (("intel-rapl:0", "package-0"), ("intel-rapl:0/intel-rapl:0:0", "dram")):
        (root / folder).mkdir(parents=True)
        (root / folder / "name").write_text(name)
        (root / folder / "energy_uj").write_text("12345")
        (root / folder / "max_energy_range_uj").write_text("262143328850")
    monkeypatch.setenv("GPUENERGY_POWERCAP_ROOT", str(root))
    pytester.makepyfile(test_work=suite())
    result = pytester.runpytest("--energy-domains=gpu,cpu,dram", "--energy-save")
    result.assert_outcomes(passed=1)
    [case] = saved_cases(pytester)
    assert case["per_domain"]["cpu"]["ets_j"] == 0 and case["per_domain"]["cpu"]["simulated"] is False
    assert case["per_domain"]["node"]["simulated"] is True         # the GPUs' part is still simulated


@pytest.mark.parametrize(("text", "problem"), [("cpu,dram", "gpu is always measured and must be named"), ("gpu,disk", "unknown domain 'disk'")])
def test_domains_the_plugin_cannot_measure_are_a_usage_error(pytester: pytest.Pytester, text: str, problem: str) -> None:
    pytester.makepyfile(test_work=suite())
    result = pytester.runpytest(f"--energy-domains={text}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --energy-domains={text}: {problem}; choose from gpu,cpu,dram*"])


def test_the_ini_form_takes_a_list(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nenergy_domains = gpu dram\n")
    pytester.makepyfile(test_work=suite())
    result = pytester.runpytest("-s")
    assert any("PER_DOMAIN" in line and "'dram'" in line and "'cpu'" not in line for line in result.outlines)


# -- in process ---------------------------------------------------------------------------------------

def test_parse_domains_keeps_a_fixed_order_and_drops_repeats() -> None:
    assert parse_domains(None) == ("gpu",)
    assert parse_domains("dram, GPU,dram") == ("gpu", "dram")


def test_a_domain_budget_is_checked_at_collection() -> None:
    assert budget_from_marker((), {"ets": 5, "domain": "node"}).describe() == "energy_budget(ets=5, domain='node')"
    assert budget_from_marker((), {"ets": 5}).domain == "gpu"
    with pytest.raises(BudgetError, match=r"domain= must be one of 'gpu', 'cpu', 'dram', 'node', got 'disk'"):
        budget_from_marker((), {"ets": 5, "domain": "disk"})


def test_each_domain_selects_among_its_own_budgets() -> None:
    from pytest_gpuenergy.gate.budgets import select_budget
    from pytest_gpuenergy.gpu.device import PowerLimits

    limits = PowerLimits(700_000, 700_000, 700_000, 200_000, 700_000)
    budgets = [budget_from_marker((), {"ets": 5, "domain": "node"}), budget_from_marker((), {"ets": 7, "gpu": "H100"}),
               budget_from_marker((), {"ets": 9, "domain": "cpu", "cap": 700})]
    chosen = {domain: select_budget(budgets, "NVIDIA H100", 700_000, limits, domain) for domain in ("gpu", "cpu", "dram", "node")}
    assert {d: b.ets_j if b else None for d, b in chosen.items()} == {"gpu": 7, "cpu": 9, "dram": None, "node": 5}


def _document(per_domain: object) -> dict:
    case = {"case_id": "t.py::test_a", "test": "t.py::test_a", "cap": "current", "gpu_index": 0, "gpu_name": "H100",
            "gpu_uuid": "GPU-0", "backend": "sim", "simulated": True, "method": "counter", "power_source": None,
            "limit_requested_w": None, "limit_enforced_w": 700.0, "default_limit_w": 700.0,
            "repetitions": [{"ets_j": 10.0, "time_s": 1.0, "ets_low_j": 9.0, "ets_high_j": 11.0}],
            "per_domain": per_domain}
    return {"format": "pytest-gpuenergy-run", "version": 3, "run_id": "r1", "created_at": "2026-11-25T10:00:00+00:00",
            "backend": "sim", "simulated": True, "gpu_model": "H100", "machine": {}, "commit": None, "options": {},
            "cases": [case]}


def test_per_domain_survives_a_run_document_and_damage_to_it_is_named() -> None:
    figures = {"gpu": DomainEnergy(10.0, 9.0, 11.0, True), "cpu": DomainEnergy(4.0, 3.9, 4.1, True)}
    data = _document({d: f.to_json() for d, f in figures.items()})
    document = RunDocument.from_json(data, "run.json")
    assert document.cases[0].per_domain == figures
    assert document.to_json()["cases"][0]["per_domain"] == data["cases"][0]["per_domain"]
    assert "per_domain" not in RunDocument.from_json(_document(None), "run.json").to_json()["cases"][0]
    bad = {"cpu": {"ets_j": 5.0, "ets_low_j": 3.9, "ets_high_j": 4.1, "simulated": True}}
    with pytest.raises(StorageError, match=r"cases\[0\].per_domain.cpu: ets_low_j <= ets_j <= ets_high_j must hold"):
        RunDocument.from_json(_document(bad), "run.json")
    with pytest.raises(StorageError, match=r"per_domain.disk.domain: must be one of gpu, cpu, dram, node"):
        RunDocument.from_json(_document({"disk": bad["cpu"]}), "run.json")


def test_old_documents_without_per_domain_still_load(tmp_path: Path) -> None:
    data = _document(None)
    del data["cases"][0]["per_domain"]
    assert RunDocument.from_json(data, "run.json").cases[0].per_domain == {}


# -- the gate by domain: --energy-fail=node.ets:5% -------------------------------------------------

def heavier_suite(scale: float) -> str:
    work = json.loads(WORK)
    work["flops_tf32"] *= scale
    return suite().replace(WORK, json.dumps(work))


def test_the_gate_fails_a_node_regression_and_names_the_domain(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=heavier_suite(1.0))
    pytester.runpytest("--energy-domains=gpu,cpu,dram", "--energy-save").assert_outcomes(passed=1)
    pytester.makepyfile(test_work=heavier_suite(1.6))
    result = pytester.runpytest("--energy-domains=gpu,cpu,dram", "--energy-compare",
                                           "--energy-fail=node.ets:5%", "--energy-json=cmp.json")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*ENERGY REGRESSION*test_train*node ETS +*"])
    [case] = json.loads((pytester.path / "cmp.json").read_text())["comparisons"][0]["cases"]
    node = case["metrics"]["node.ets"]
    assert node["verdict"] == "regression" and node["threshold_pct"] == 5.0 and node["change_pct"] > 5.0
    assert case["metrics"]["ets"]["threshold_pct"] is None          # only the node was gated
    assert "cpu.ets" not in case["metrics"]                          # a domain no threshold names is not compared


def test_an_unchanged_node_passes_and_a_baseline_without_domains_is_said(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_work=heavier_suite(1.0))
    pytester.runpytest("--energy-domains=gpu,cpu,dram", "--energy-save").assert_outcomes(passed=1)
    same = pytester.runpytest("--energy-domains=gpu,cpu,dram", "--energy-compare",
                                         "--energy-fail=node.ets:5%,dram.ets:5%", "--energy-json=same.json")
    assert same.ret == 0
    [case] = json.loads((pytester.path / "same.json").read_text())["comparisons"][0]["cases"]
    assert case["metrics"]["node.ets"]["verdict"] in ("unchanged", "inconclusive")
    assert case["metrics"]["dram.ets"]["verdict"] in ("unchanged", "inconclusive")
    blind = pytester.runpytest("--energy-compare", "--energy-fail=node.ets:5%", "--energy-json=blind.json")
    assert blind.ret == 0
    [case] = json.loads((pytester.path / "blind.json").read_text())["comparisons"][0]["cases"]
    assert "node.ets" not in case["metrics"]
    assert any("node.ets not compared: this run did not measure node" in note for note in case["notes"])


@pytest.mark.parametrize(("text", "expected"), [("node.ets:5%", {"node.ets": 5.0}),
                                                ("ets:5%,cpu.ets:10%", {"ets": 5.0, "cpu.ets": 10.0})])
def test_a_domains_threshold_is_read_from_energy_fail(text: str, expected: dict) -> None:
    from pytest_gpuenergy.gate.settings import parse_thresholds
    assert parse_thresholds(text) == expected


def test_an_unknown_domain_threshold_names_the_ones_there_are() -> None:
    from pytest_gpuenergy.gate.settings import parse_thresholds
    with pytest.raises(ValueError, match=r"unknown metric 'gpu.ets'.*node\.ets"):
        parse_thresholds("gpu.ets:5%")


# -- domains.py on its own: the figures per domain, word for word -------------------------------------

def _gpu_result(repetitions: list[tuple[float, float | None, float | None]], *, simulated: bool = True,
                per_domain: dict | None = None) -> EnergyResult:
    """One GPU's result with repetitions of (ETS, low, high) J per call."""
    reps = tuple(Repetition(ets_j=e, time_s=1.0, mean_power_w=e, peak_power_w=e, calls=1, ets_low_j=low,
                            ets_high_j=high) for e, low, high in repetitions)
    gpu = GpuResult(gpu_index=0, gpu_name="H100", gpu_uuid="GPU-0", backend="sim" if simulated else "nvml",
                    simulated=simulated, method="counter", power_source=None, cap="current", limit_requested_w=None,
                    limit_enforced_w=700.0, default_limit_w=700.0, repetitions=reps)
    return EnergyResult(per_gpu=(gpu,), per_domain=per_domain or {})


def test_per_domain_divides_each_regions_host_figures_by_its_calls_and_averages_the_regions() -> None:
    result = _gpu_result([(10.0, 9.0, 12.0), (14.0, 13.0, 15.0)])
    regions = [([HostFigure("cpu", 40.0, 36.0, 44.0), HostFigure("dram", 8.0, 6.0, 10.0)], 4),
               ([HostFigure("dram", 3.0, 2.0, 5.0), HostFigure("cpu", 30.0, 24.0, 33.0)], 2)]
    found = per_domain(result, regions, host_simulated=False)
    assert list(found) == ["gpu", "cpu", "dram", "node"]              # the host's in the first region's order
    assert found["gpu"] == DomainEnergy(12.0, 11.0, 13.5, True)       # the summary's mean and mean bounds
    assert found["cpu"] == DomainEnergy((10.0 + 15.0) / 2, (9.0 + 12.0) / 2, (11.0 + 16.5) / 2, False)
    assert found["dram"] == DomainEnergy((2.0 + 1.5) / 2, (1.5 + 1.0) / 2, (2.5 + 2.5) / 2, False)
    assert found["node"] == DomainEnergy(12.0 + 12.5 + 1.75, 11.0 + 10.5 + 1.25, 13.5 + 13.75 + 2.5, True)


def test_per_domain_without_the_host_is_the_gpus_and_their_total() -> None:
    result = _gpu_result([(10.0, None, None)], simulated=False)       # a document from before bounds existed
    found = per_domain(result, [], host_simulated=True)
    assert found == {"gpu": DomainEnergy(10.0, 10.0, 10.0, False), "node": DomainEnergy(10.0, 10.0, 10.0, False)}


def test_the_nodes_total_is_simulated_where_any_part_is() -> None:
    regions = [([HostFigure("cpu", 4.0, 3.0, 5.0)], 1)]
    assert per_domain(_gpu_result([(1.0, 1.0, 1.0)], simulated=False), regions, True)["node"].simulated
    assert per_domain(_gpu_result([(1.0, 1.0, 1.0)]), regions, False)["node"].simulated
    assert not per_domain(_gpu_result([(1.0, 1.0, 1.0)], simulated=False), regions, False)["node"].simulated


@pytest.mark.parametrize(("text", "expected"), [
    ("gpu", ("gpu",)), ("cpu,gpu", ("gpu", "cpu")), (" Dram ,, gpu ,", ("gpu", "dram")),
    ("gpu,cpu,dram", ("gpu", "cpu", "dram")),
])
def test_parse_domains_reads_any_order_case_and_spacing(text: str, expected: tuple) -> None:
    assert parse_domains(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("gpu,disk,net", "--energy-domains=gpu,disk,net: unknown domain 'disk'; choose from gpu,cpu,dram (e.g. gpu,cpu,dram)"),
    ("cpu,dram", "--energy-domains=cpu,dram: gpu is always measured and must be named; choose from gpu,cpu,dram "
                 "(e.g. gpu,cpu,dram)"),
    ("", "--energy-domains=: gpu is always measured and must be named; choose from gpu,cpu,dram (e.g. gpu,cpu,dram)"),
    ("node,gpu", "--energy-domains=node,gpu: unknown domain 'node'; choose from gpu,cpu,dram (e.g. gpu,cpu,dram)"),
])
def test_parse_domains_refuses_in_one_line_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_domains(text)
    assert str(caught.value) == message


def test_merging_repeated_results_weights_each_domain_by_its_repetitions() -> None:
    one = _gpu_result([(10.0, 9.0, 11.0)], per_domain={"gpu": DomainEnergy(10.0, 9.0, 11.0, False),
                                                       "cpu": DomainEnergy(4.0, 3.0, 5.0, False)})
    three = _gpu_result([(14.0, 13.0, 15.0)] * 3, per_domain={"gpu": DomainEnergy(14.0, 13.0, 15.0, False),
                                                               "cpu": DomainEnergy(8.0, 7.0, 10.0, True)})
    merged = merge_domains([one, three])
    assert list(merged) == ["gpu", "cpu"]
    assert merged["gpu"] == DomainEnergy((10.0 + 3 * 14.0) / 4, (9.0 + 3 * 13.0) / 4, (11.0 + 3 * 15.0) / 4, False)
    assert merged["cpu"] == DomainEnergy((4.0 + 3 * 8.0) / 4, (3.0 + 3 * 7.0) / 4, (5.0 + 3 * 10.0) / 4, True)
    assert merge_domains([three])["cpu"] == DomainEnergy(8.0, 7.0, 10.0, True)


def test_merging_gives_nothing_where_any_result_has_no_domains() -> None:
    with_domains = _gpu_result([(1.0, 1.0, 1.0)], per_domain={"gpu": DomainEnergy(1.0, 1.0, 1.0, True)})
    assert merge_domains([]) == {}
    assert merge_domains([with_domains, _gpu_result([(1.0, 1.0, 1.0)])]) == {}
    assert merge_domains([_gpu_result([(1.0, 1.0, 1.0)]), with_domains]) == {}


def test_tests_shorter_than_the_hosts_counter_updates_read_no_0_j_and_say_why(pytester: pytest.Pytester) -> None:
    """Plain tests of well under a millisecond (--energy-all) and an empty ``with energy_meter:`` block:
    RAPL publishes about every millisecond, so their CPU and DRAM readings may hold no publication.
    Their figures are not 0 J for work done (the host's recent power times their time), within a
    bound the counters allow, and the result's notes say why."""
    pytester.makepyfile(test_tiny="".join(f"\ndef test_{i}():\n    assert sum(range(100)) == 4950\n" for i in range(3))
                        + textwrap.dedent("""
        def test_block(energy_meter):
            with energy_meter:
                pass
            result = energy_meter.result
            print("HOST", {d: (f.ets_low_j, f.ets_j, f.ets_high_j) for d, f in result.per_domain.items()})
            print("NOTES", [n for n in result.notes if "updates of the host's" in n])
        """))
    result = pytester.runpytest("--energy-all", "--energy-domains=gpu,cpu,dram", "--energy-save", "-s")
    result.assert_outcomes(passed=4)
    cases = saved_cases(pytester)
    assert len(cases) == 4
    for case in cases:
        assert case["summary"]["time_s"] < 0.002
        for domain in ("cpu", "dram"):
            figure = case["per_domain"][domain]
            assert 0 <= figure["ets_low_j"] < figure["ets_j"] <= figure["ets_high_j"], (domain, figure)
        # the saved run keeps why: the host's estimate, and the GPU counter's coarse figure
        assert any("updates of the host's cpu counters" in note for note in case["notes"]), case["notes"]
        assert any("fewer than 2 publications of the energy counter" in note for note in case["notes"]), case["notes"]
    [notes] = [line for line in result.outlines if line.startswith("NOTES")]
    assert "at most two updates of the host's cpu counters" in notes and "dram counters" in notes
