"""The host's CPU and DRAM counters through Linux powercap: finding the zones in a real folder tree,
reading them (and refusing an unreadable or damaged one in one line), following wraps, and the
simulated tree that stands in for the host beside the simulated GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpuenergy import realtime
from pytest_gpuenergy.errors import HostEnergyError
from pytest_gpuenergy.host.powercap import RealSysfs, find_zones, read_counter_uj
from pytest_gpuenergy.host.recorder import PLAUSIBLE_MAX_W, HostRecorder
from pytest_gpuenergy.sim.clock import VirtualClock
from pytest_gpuenergy.sim.nvml import SimulatedNvml
from pytest_gpuenergy.sim.powercap import SimulatedPowercap, ranges_from_env
from pytest_gpuenergy.sim.roofline import GpuWork

RANGE_UJ = 262_143_328_850


def zone(folder: Path, name: str, energy_uj: int = 0, range_uj: int = RANGE_UJ) -> Path:
    folder.mkdir(parents=True)
    (folder / "name").write_text(name + "\n")
    (folder / "energy_uj").write_text(f"{energy_uj}\n")
    (folder / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return folder


def server_tree(root: Path, range_uj: int = RANGE_UJ) -> Path:
    """Two packages with DRAM, a client part's core/uncore, psys and the MMIO copy of package 0."""
    zone(root / "intel-rapl:0", "package-0", 1000, range_uj)
    zone(root / "intel-rapl:0" / "intel-rapl:0:0", "core", 10)
    zone(root / "intel-rapl:0" / "intel-rapl:0:1", "uncore", 20)
    zone(root / "intel-rapl:0" / "intel-rapl:0:2", "dram", 300, range_uj)
    zone(root / "intel-rapl:1", "psys", 5)
    zone(root / "intel-rapl:2", "package-1", 2000, range_uj)
    zone(root / "intel-rapl:2" / "intel-rapl:2:0", "dram", 400, range_uj)
    zone(root / "intel-rapl-mmio:0", "package-0", 1000)
    (root / "intel-rapl").mkdir()          # the control type's own folder: no zone
    return root


# -- finding and reading zones (the real file path) ---------------------------------------------

def test_packages_are_cpu_and_their_dram_sub_zones_are_dram_psys_core_and_mmio_are_left_out(tmp_path: Path) -> None:
    root = server_tree(tmp_path / "powercap")
    zones = find_zones(RealSysfs(), root, ("cpu", "dram"))
    assert [(z.domain, z.label, z.folder.relative_to(root).as_posix()) for z in zones] == [
        ("cpu", "package-0", "intel-rapl:0"), ("dram", "dram of package-0", "intel-rapl:0/intel-rapl:0:2"),
        ("cpu", "package-1", "intel-rapl:2"), ("dram", "dram of package-1", "intel-rapl:2/intel-rapl:2:0"),
    ]
    assert [read_counter_uj(RealSysfs(), z) for z in zones] == [1000, 300, 2000, 400]


def test_only_the_domains_asked_for_are_read(tmp_path: Path) -> None:
    root = server_tree(tmp_path / "powercap")
    assert {z.domain for z in find_zones(RealSysfs(), root, ("cpu",))} == {"cpu"}
    assert {z.domain for z in find_zones(RealSysfs(), root, ("dram",))} == {"dram"}


def test_no_powercap_tree_is_one_line_that_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(HostEnergyError) as caught:
        find_zones(RealSysfs(), tmp_path / "absent", ("cpu",))
    message = str(caught.value)
    assert "\n" not in message
    assert f"no Linux powercap tree at {tmp_path / 'absent'}" in message
    assert "drop cpu,dram from --energy-domains" in message


def test_a_cpu_without_dram_zones_refuses_dram_but_gives_cpu(tmp_path: Path) -> None:
    root = tmp_path / "amd"
    zone(root / "intel-rapl:0", "package-0", 7)
    zone(root / "intel-rapl:0" / "intel-rapl:0:0", "core", 3)
    assert [z.label for z in find_zones(RealSysfs(), root, ("cpu",))] == ["package-0"]
    with pytest.raises(HostEnergyError, match="no RAPL DRAM zone .* drop dram from --energy-domains"):
        find_zones(RealSysfs(), root, ("cpu", "dram"))


def test_a_tree_without_packages_names_the_driver(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    zone(root / "intel-rapl:0", "psys", 1)
    with pytest.raises(HostEnergyError, match=r"modprobe intel_rapl_msr"):
        find_zones(RealSysfs(), root, ("cpu",))


@pytest.mark.parametrize(("text", "file"), [("abc", "energy_uj"), ("-5", "energy_uj"), ("", "energy_uj"),
                                            ("0", "max_energy_range_uj")])
def test_a_damaged_counter_is_one_line_naming_the_file(tmp_path: Path, text: str, file: str) -> None:
    root = server_tree(tmp_path / "powercap")
    (root / "intel-rapl:0" / file).write_text(text)
    with pytest.raises(HostEnergyError) as caught:
        zones = find_zones(RealSysfs(), root, ("cpu",))
        read_counter_uj(RealSysfs(), zones[0])
    assert str(caught.value).startswith(f"{root / 'intel-rapl:0' / file}: ")
    assert "\n" not in str(caught.value)


_READ_AS_NOBODY = """
import encodings.ascii, os, sys
from pathlib import Path
from pytest_gpuenergy import realtime
from pytest_gpuenergy.errors import HostEnergyError
from pytest_gpuenergy.host.powercap import RealSysfs, find_zones, read_counter_uj
if os.getuid() == 0:
    os.setgid(65534); os.setuid(65534)
zones = find_zones(RealSysfs(), Path(sys.argv[1]), ("cpu",))
try:
    read_counter_uj(RealSysfs(), zones[0])
except HostEnergyError as exc:
    print(exc)
"""


def test_a_counter_only_root_may_read_is_one_line_with_the_fix() -> None:
    """As since Linux 5.10: energy_uj mode 0400, owned by root. Read by an unprivileged user (this
    test drops to nobody when it runs as root, for whom every file is readable)."""
    folder = Path(tempfile.mkdtemp(prefix="powercap-"))
    try:
        os.chmod(folder, 0o755)
        root = server_tree(folder / "powercap")
        for path in root.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o444)
        counter = root / "intel-rapl:0" / "energy_uj"
        os.chmod(counter, 0o400 if os.getuid() == 0 else 0o000)
        shown = subprocess.run([sys.executable, "-c", _READ_AS_NOBODY, str(root)], capture_output=True, text=True,
                               check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)
    line = shown.stdout.strip()
    assert line.count("\n") == 0
    assert line.startswith(f"{counter}: permission denied: since Linux 5.10")
    assert f"sudo chmod a+r {root}/intel-rapl:*/energy_uj" in line
    assert "drop cpu,dram from --energy-domains" in line


# -- following the counters ---------------------------------------------------------------------------

def test_a_wrap_between_two_reads_is_unwrapped(tmp_path: Path) -> None:
    root = server_tree(tmp_path / "powercap", range_uj=10_000_000)
    clock = VirtualClock()
    recorder = HostRecorder(RealSysfs(), root, ("cpu",), clock.now, virtual=clock)
    start = recorder.mark()
    (root / "intel-rapl:0" / "energy_uj").write_text("9000000")      # +8.999 J
    clock.advance_to(recorder.period_s)                               # the recorder's own poll sees it
    (root / "intel-rapl:0" / "energy_uj").write_text("500000")       # past 10 J: wrapped, +1.5 J
    (root / "intel-rapl:2" / "energy_uj").write_text("1002000")      # +1 J
    clock.advance_to(1.0)
    [cpu] = recorder.figures(start, recorder.mark())
    assert cpu.ets_j == pytest.approx(8.999 + 1.5 + 1.0, rel=1e-12)
    # two packages, each: a unit at both edges and up to 1 ms of the most power the reading allows at
    # each (11.499 J over the region less one update: the reading misses at most that much of it)
    assert cpu.high_j - cpu.ets_j == pytest.approx(cpu.ets_j - cpu.low_j) == pytest.approx(
        2 * (122.08e-6 + 11.499 / 0.999 * 1e-3), rel=1e-12)
    assert cpu.note is None


def test_polling_keeps_up_with_the_shortest_wrap_at_the_highest_plausible_power(tmp_path: Path) -> None:
    root = server_tree(tmp_path / "powercap", range_uj=40_000_000)      # 40 J: 0.08 s at 500 W
    clock = VirtualClock()
    recorder = HostRecorder(RealSysfs(), root, ("cpu", "dram"), clock.now, virtual=clock)
    assert recorder.period_s == pytest.approx(0.5 * 40 / PLAUSIBLE_MAX_W["cpu"], rel=1e-12)
    clock.advance_to(1.0)
    assert recorder.mark().at == 1.0
    assert len(recorder._polls) >= 1.0 / recorder.period_s


class _StalledClock:
    """A virtual clock whose polling never runs: a host too busy for the recorder's thread."""

    def __init__(self) -> None:
        self.now = 0.0

    def start(self, steps: object, on_error: object) -> SimpleNamespace:
        return SimpleNamespace(alive=True, stop=lambda: None)


def test_reads_too_far_apart_to_rule_out_a_wrap_say_so_and_widen_the_bound(tmp_path: Path) -> None:
    root = server_tree(tmp_path / "powercap", range_uj=10_000_000)      # 10 J: 0.02 s at 500 W
    clock = _StalledClock()
    recorder = HostRecorder(RealSysfs(), root, ("cpu",), lambda: clock.now, virtual=clock)
    start = recorder.mark()
    clock.now = 0.1
    (root / "intel-rapl:0" / "energy_uj").write_text("3000")
    [cpu] = recorder.figures(start, recorder.mark())
    assert cpu.ets_j == pytest.approx(0.002, rel=1e-12)
    # 0.1 s at up to 500 W is 50 J: 5 wraps of 10 J per package could hide in it
    assert cpu.high_j == pytest.approx(0.002 + 2 * (122.08e-6 + 0.002 / 0.099 * 1e-3) + 2 * 5 * 10, rel=1e-12)
    assert cpu.note is not None and "read 0.1 s apart" in cpu.note and "may be short by up to 100 J" in cpu.note
    assert "(range 10 J)" in cpu.note


def test_a_counter_that_turns_unreadable_stops_the_recorder_and_the_next_mark_says_why(tmp_path: Path) -> None:
    root = server_tree(tmp_path / "powercap")
    clock = VirtualClock()
    recorder = HostRecorder(RealSysfs(), root, ("cpu",), clock.now, virtual=clock)
    (root / "intel-rapl:2" / "energy_uj").write_text("gone")
    clock.advance_to(recorder.period_s * 2)
    assert not recorder.is_alive()
    with pytest.raises(HostEnergyError, match=r"intel-rapl:2/energy_uj: not a powercap counter") as caught:
        recorder.mark()
    assert str(caught.value).startswith(f"{root / 'intel-rapl:2' / 'energy_uj'}: not a powercap counter")   # as read, not rewrapped


# -- the simulated tree ------------------------------------------------------------------------------

def _simulator(state: Path) -> SimulatedNvml:
    sim = SimulatedNvml(state_dir=state, seed=0)
    sim.nvmlInit()
    return sim


def _two_seconds_of_work(sim: SimulatedNvml) -> None:
    step = GpuWork(flops_tf32=2e13, bytes=1e10, kernels=100)
    while sim.clock.now() < 2.6:
        sim.simDeclareWork(step)
        sim.simSynchronize()


def _measure(sim: SimulatedNvml, tree: SimulatedPowercap) -> tuple[list, dict[str, float], float]:
    recorder = HostRecorder(tree, tree.root, ("cpu", "dram"), sim.clock.now, virtual=sim.clock, simulated=True)
    sim.simSleepUntil(0.5)
    start, truth0 = recorder.mark(), {d: tree.exact_j(d) for d in ("cpu", "dram")}
    _two_seconds_of_work(sim)
    end = recorder.mark()
    truth = {d: tree.exact_j(d) - truth0[d] for d in ("cpu", "dram")}
    return recorder.figures(start, end), truth, end.at - start.at


def test_with_counters_that_wrap_every_0_4_s_a_2_s_region_is_within_10_percent_of_the_truth(sim_state: Path) -> None:
    sim = _simulator(sim_state)
    probe = SimulatedPowercap(sim)
    busy_cpu_w, busy_dram_w = sum(probe.model.power_w("cpu")), sum(probe.model.power_w("dram"))
    ranges = {"cpu": int(busy_cpu_w * 0.4 * 1e6), "dram": int(busy_dram_w * 0.4 * 1e6)}    # one wrap per 0.4 s busy
    tree = SimulatedPowercap(sim, range_uj=ranges)
    figures, truth, duration = _measure(sim, tree)
    assert duration >= 2.0
    for figure in figures:
        wraps = truth[figure.domain] / tree.model.packages / (ranges[figure.domain] / 1e6)
        assert wraps >= 4.5                                   # the region spans several wraps of every zone
        assert figure.ets_j == pytest.approx(truth[figure.domain], rel=0.10)
        assert figure.low_j <= truth[figure.domain] <= figure.high_j
        assert figure.note is None
    cpu = next(f for f in figures if f.domain == "cpu")
    # the host worked all through the region: both packages at idle + active power
    assert cpu.ets_j / duration == pytest.approx(2 * busy_cpu_w, rel=0.01)


@pytest.mark.parametrize("length_ms", [0.2, 0.7, 1.0, 1.6, 2.5, 4.0, 12.0])
@pytest.mark.parametrize("offset_ms", [0.05, 0.5, 0.95])
def test_a_region_shorter_than_a_few_counter_updates_is_not_0_j_and_its_bound_holds_the_truth(
        sim_state: Path, length_ms: float, offset_ms: float) -> None:
    """RAPL publishes about every millisecond: a region of 0.2 ms may see no publication at all. Its
    figure is then the host's mean power so far over the region's time, not 0 J, and its bound,
    the staleness of each edge worth the most a zone can plausibly draw, holds the truth; regions of a
    few updates are bounded by the power their own reading implies."""
    sim = _simulator(sim_state)
    tree = SimulatedPowercap(sim)
    recorder = HostRecorder(tree, tree.root, ("cpu", "dram"), sim.clock.now, virtual=sim.clock, simulated=True)
    sim.simSleepUntil(0.2 + offset_ms / 1000)                   # against the 1 ms publications
    start, truth0 = recorder.mark(), {d: tree.exact_j(d) for d in ("cpu", "dram")}
    sim.simSleepUntil(sim.clock.now() + length_ms / 1000)
    end = recorder.mark()
    for figure in recorder.figures(start, end):
        truth_j = tree.exact_j(figure.domain) - truth0[figure.domain]
        assert truth_j > 0
        assert figure.ets_j > 0
        assert figure.low_j <= truth_j <= figure.high_j, (figure, truth_j)
        assert figure.ets_j == pytest.approx(truth_j, rel=0.6 if length_ms < 2 else 0.35)
        if length_ms >= 10:
            assert figure.note is None and figure.high_j - figure.low_j < 0.5 * truth_j


def test_simulated_host_figures_repeat_exactly_for_a_seed(tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        sim = _simulator(tmp_path / name)
        figures, _, _ = _measure(sim, SimulatedPowercap(sim, range_uj={"cpu": 48_000_000, "dram": 7_200_000}))
        runs.append(figures)
        sim.nvmlShutdown()
    assert runs[0] == runs[1]


def test_an_idle_simulated_host_draws_its_idle_power(sim_state: Path) -> None:
    sim = _simulator(sim_state)
    tree = SimulatedPowercap(sim)
    recorder = HostRecorder(tree, tree.root, ("cpu", "dram"), sim.clock.now, virtual=sim.clock, simulated=True)
    start = recorder.mark()
    sim.simSleepUntil(3.0)
    cpu, dram = recorder.figures(start, recorder.mark())
    assert cpu.ets_j == pytest.approx(3.0 * 2 * tree.model.package_idle_w, rel=1e-4)
    assert dram.ets_j == pytest.approx(3.0 * 2 * tree.model.dram_idle_w, rel=1e-4)


def test_the_simulated_tree_reads_as_a_real_one(sim_state: Path) -> None:
    sim = _simulator(sim_state)
    tree = SimulatedPowercap(sim, range_uj={"cpu": 5_000_000, "dram": 6_000_000})
    assert tree.entries(tree.root) == ["intel-rapl:0", "intel-rapl:1"]
    assert tree.read(tree.root / "intel-rapl:1" / "name") == "package-1\n"
    assert tree.read(tree.root / "intel-rapl:1" / "intel-rapl:1:0" / "name") == "dram\n"
    assert tree.read(tree.root / "intel-rapl:0" / "intel-rapl:0:0" / "max_energy_range_uj") == "6000000\n"
    for missing in (tree.root / "intel-rapl:2", tree.root / "intel-rapl:0" / "intel-rapl:0:1", tree.root.parent):
        with pytest.raises(FileNotFoundError):
            tree.entries(missing)
    counter = int(tree.read(tree.root / "intel-rapl:0" / "energy_uj"))
    assert 0 <= counter < 5_000_000


def test_the_simulated_tree_can_refuse_its_counters_as_a_kernel_does_for_users(sim_state: Path) -> None:
    sim = _simulator(sim_state)
    tree = SimulatedPowercap(sim, fault="unreadable")
    with pytest.raises(HostEnergyError) as caught:
        HostRecorder(tree, tree.root, ("cpu",), sim.clock.now, virtual=sim.clock, simulated=True)
    assert str(caught.value).startswith(f"{tree.root / 'intel-rapl:0' / 'energy_uj'}: permission denied")


def test_simulated_ranges_come_from_one_number_or_per_domain() -> None:
    assert ranges_from_env("5000000") == {"cpu": 5_000_000, "dram": 5_000_000}
    assert ranges_from_env("dram=7000") == {"cpu": 262_143_328_850, "dram": 7000}
    for bad in ("cpu=12", "gpu=5000", "lots"):
        with pytest.raises(ValueError, match="GPUENERGY_SIM_POWERCAP_RANGE_UJ"):
            ranges_from_env(bad)


def test_a_tree_that_outlives_a_tests_world_starts_its_counters_afresh_with_the_next(sim_state: Path) -> None:
    """Each test's virtual world starts at the same moment on idle GPUs: the host's counters too, so a
    test's figures do not depend on the tests before it."""
    sim = _simulator(sim_state)
    tree = SimulatedPowercap(sim)
    fresh = [tree.read(tree.root / "intel-rapl:0" / "energy_uj")]
    _two_seconds_of_work(sim)
    assert tree.read(tree.root / "intel-rapl:0" / "energy_uj") != fresh[0]
    sim.simBeginTest("tests/test_x.py::test_next", [0])
    assert tree.read(tree.root / "intel-rapl:0" / "energy_uj") == fresh[0]
    sim.simSleepUntil(1.0)
    assert tree.exact_j("cpu") == pytest.approx(2 * tree.model.package_idle_w * 1.0)


def test_on_the_hosts_clock_a_thread_polls_and_a_counter_gone_bad_stops_it_with_the_reason(tmp_path: Path) -> None:
    import time

    def put(path: Path, text: str) -> None:          # whole, as the kernel shows a counter: never half-written
        (path.parent / "new").write_text(text)
        os.replace(path.parent / "new", path)

    root = server_tree(tmp_path / "powercap", range_uj=10_000_000)      # polled every 10 ms
    recorder = HostRecorder(RealSysfs(), root, ("cpu",), time.monotonic)
    try:
        start = recorder.mark()
        put(root / "intel-rapl:0" / "energy_uj", "9001000")
        time.sleep(0.1)
        put(root / "intel-rapl:0" / "energy_uj", "1000")         # wrapped: +1 J more
        time.sleep(0.1)
        assert recorder.is_alive() and len(recorder._polls) >= 5
        [cpu] = recorder.figures(start, recorder.mark())
        assert cpu.ets_j == pytest.approx(10.0)
        put(root / "intel-rapl:2" / "energy_uj", "")
        deadline = time.monotonic() + 5
        while recorder.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not recorder.is_alive()
        with pytest.raises(HostEnergyError, match="intel-rapl:2/energy_uj: not a powercap counter"):
            recorder.mark()
    finally:
        recorder.stop()


# -- short regions, exactly (a stalled clock: the recorder reads only at the marks) --------------------

def _counters(root: Path, package_0_uj: int, package_1_uj: int) -> None:
    (root / "intel-rapl:0" / "energy_uj").write_text(f"{package_0_uj}\n")
    (root / "intel-rapl:2" / "energy_uj").write_text(f"{package_1_uj}\n")


HALF_SHORT_J = 2 * (2 * 61.04e-6 + 500.0 * 0.001)    # two packages: a unit at both edges, 1 ms at 500 W at each


def test_a_short_regions_figure_is_the_power_of_the_last_10_ms_or_more_times_its_time(tmp_path: Path) -> None:
    root = server_tree(tmp_path / "powercap", range_uj=200_000_000)      # 200 J: one wrap could hide in 0.5 s
    clock = _StalledClock()
    recorder = HostRecorder(RealSysfs(), root, ("cpu", "dram"), lambda: clock.now, virtual=clock)
    clock.now = 0.5
    _counters(root, 1000 + 30_000_000, 2000 + 30_000_000)              # 120 W over the first 0.5 s
    recorder.mark()
    clock.now = 1.0
    _counters(root, 1000 + 80_000_000, 2000 + 80_000_000)              # 200 W over the next 0.5 s
    start = recorder.mark()
    clock.now = 1.0002                                                 # no publication in 0.2 ms
    cpu, dram = recorder.figures(start, recorder.mark())
    power_w = 100.0 / 0.5002                                           # from the last read 10 ms or more before its end
    assert cpu.ets_j == pytest.approx(power_w * 0.0002, rel=1e-9)
    assert (cpu.low_j, cpu.high_j) == (0.0, pytest.approx(HALF_SHORT_J, rel=1e-12))
    assert cpu.note == ("the region (0.2 ms) is at most two updates of the host's cpu counters (about 1 ms): its cpu "
                        "ETS is the host's power over the last 0.5 s times the region's time")
    assert dram.domain == "dram" and dram.ets_j == 0.0 and dram.note is not None and "dram counters" in dram.note


def test_a_short_region_of_a_young_recorder_takes_its_power_from_its_own_reading(tmp_path: Path) -> None:
    """No read 10 ms before its end, and not even two updates since the recorder's first: the region's
    own reading over at least one update is all there is."""
    root = server_tree(tmp_path / "powercap")
    clock = _StalledClock()
    recorder = HostRecorder(RealSysfs(), root, ("cpu",), lambda: clock.now, virtual=clock)
    clock.now = 0.0015
    _counters(root, 1000 + 50_000, 2000 + 50_000)
    start = recorder.mark()
    clock.now = 0.002                                                 # the window since the first read: exactly two updates
    _counters(root, 1000 + 75_000, 2000 + 75_000)
    [cpu] = recorder.figures(start, recorder.mark())
    assert cpu.ets_j == pytest.approx(0.05 / 0.001 * 0.0005, rel=1e-9)      # 50 mJ over (at least) one update
    assert (cpu.low_j, cpu.high_j) == (0.0, pytest.approx(0.05 + HALF_SHORT_J, rel=1e-12))
    assert "over the last 0.002 s" in cpu.note


def test_a_region_of_exactly_two_updates_is_short_and_the_lookback_starts_at_the_first_read(tmp_path: Path) -> None:
    root = server_tree(tmp_path / "powercap")
    clock = _StalledClock()
    recorder = HostRecorder(RealSysfs(), root, ("cpu",), lambda: clock.now, virtual=clock)
    clock.now = 0.005
    _counters(root, 1000 + 500_000, 2000 + 500_000)                  # 200 W since the first read
    start = recorder.mark()
    clock.now = 0.0052
    [cpu] = recorder.figures(start, recorder.mark())
    assert cpu.ets_j == pytest.approx(1.0 / 0.0052 * 0.0002, rel=1e-9)     # no read 10 ms before: since the first
    clock.now, edge = 0.0072, recorder.mark()
    [two] = recorder.figures(edge, edge.__class__(edge.at + 0.002, edge.totals_uj))
    assert two.note is not None                                      # 2 ms: still short


def test_a_short_region_keeps_the_note_of_wraps_that_could_hide_in_it(tmp_path: Path) -> None:
    root = server_tree(tmp_path / "powercap", range_uj=50_000)        # 50 mJ: 0.1 ms at 500 W
    clock = _StalledClock()
    recorder = HostRecorder(RealSysfs(), root, ("cpu", "dram"), lambda: clock.now, virtual=clock)
    clock.now = 0.5
    start = recorder.mark()
    clock.now = 0.5002
    cpu, dram = recorder.figures(start, recorder.mark())
    wraps_note, short_note = cpu.note.split("; the region")
    assert "read 0.0002 s apart" in wraps_note and "(range 0.05 J)" in wraps_note and "short by up to 0.1 J" in wraps_note
    assert short_note.startswith(" (0.2 ms) is at most two updates")
    assert cpu.high_j == pytest.approx(HALF_SHORT_J + 0.1, rel=1e-12)            # the wraps the note names, in the bound
    assert dram.note is not None and dram.note.startswith("the region (0.2 ms)")   # 0.2 ms at 200 W: no DRAM wrap
    assert dram.high_j == pytest.approx(2 * (2 * 61.04e-6 + 200.0 * 0.001), rel=1e-12)


def test_polls_are_trimmed_with_their_totals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_gpuenergy.host.recorder as host_recorder

    monkeypatch.setattr(host_recorder, "_KEEP_POLLS", 4)
    root = server_tree(tmp_path / "powercap")
    clock = _StalledClock()
    recorder = HostRecorder(RealSysfs(), root, ("cpu",), lambda: clock.now, virtual=clock)
    lengths = []
    for step in range(1, 7):
        clock.now = 0.1 * step
        _counters(root, 1000 + step * 10_000_000, 2000 + step * 10_000_000)     # 200 W
        recorder.mark()
        lengths.append(len(recorder._polls))
    assert lengths == [2, 3, 4, 3, 4, 3]                               # past 4, the older half goes
    assert recorder._polls == pytest.approx([0.4, 0.5, 0.6])
    assert [totals["cpu"] for totals in recorder._totals_at] == [80_000_000, 100_000_000, 120_000_000]   # each poll's own


def test_a_recorder_on_the_hosts_clock_runs_a_named_daemon_thread_and_stops_it(tmp_path: Path) -> None:
    recorder = HostRecorder(RealSysfs(), server_tree(tmp_path / "powercap"), ("cpu",), time.perf_counter)
    assert recorder._thread is not None and recorder._thread.name == "gpuenergy-powercap" and recorder._thread.daemon is True
    assert recorder.is_alive()
    recorder.stop()
    assert not recorder._thread.is_alive() and not recorder.is_alive()


def test_a_recorder_on_a_virtual_clock_is_alive_until_stopped(tmp_path: Path) -> None:
    clock = VirtualClock()
    recorder = HostRecorder(RealSysfs(), server_tree(tmp_path / "powercap"), ("cpu",), clock.now, virtual=clock)
    assert recorder.is_alive()
    recorder.stop()
    assert not recorder.is_alive()


def test_a_failure_in_the_background_poll_is_said_at_the_next_mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_gpuenergy.host.recorder as host_recorder

    clock = VirtualClock()
    root = server_tree(tmp_path / "powercap")
    recorder = HostRecorder(RealSysfs(), root, ("cpu",), clock.now, virtual=clock)

    def broken(sysfs: object, zone: object) -> int:
        raise RuntimeError("the bus is gone")

    monkeypatch.setattr(host_recorder, "read_counter_uj", broken)
    clock.advance_to(2 * recorder.period_s)                            # the plan's own poll fails
    with pytest.raises(HostEnergyError) as caught:
        recorder.mark()
    assert str(caught.value) == "reading the host's powercap counters failed: RuntimeError: the bus is gone"
    assert not recorder.is_alive()


def test_a_region_worked_out_after_later_reads_counts_only_the_reads_inside_it(tmp_path: Path) -> None:
    """Figures are worked out when their publications have come, after later regions' reads: a long gap
    after the region is no gap of the region's."""
    root = server_tree(tmp_path / "powercap", range_uj=10_000_000)      # 10 J: 0.02 s at 500 W
    clock = _StalledClock()
    recorder = HostRecorder(RealSysfs(), root, ("cpu",), lambda: clock.now, virtual=clock)
    clock.now = 0.5
    start = recorder.mark()
    clock.now = 0.505
    end = recorder.mark()
    clock.now = 1.0
    recorder.mark()                                                    # the next test's region, 0.5 s later
    [cpu] = recorder.figures(start, end)
    assert cpu.note is None                                            # 5 ms at 500 W cannot wrap 10 J


def test_open_host_reads_the_simulated_tree_unless_a_root_is_given(sim_state: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpuenergy.host.recorder import open_host

    monkeypatch.delenv("GPUENERGY_POWERCAP_ROOT", raising=False)
    sim = _simulator(sim_state)
    simulated = open_host(["cpu", "dram"], simulator=sim, clock=sim.clock.now, virtual=sim.clock)
    assert simulated.simulated and simulated.domains == ("cpu", "dram") and simulated._thread is None
    assert simulated.clock == sim.clock.now and simulated.is_alive()
    simulated.stop()
    on_its_own_clock = open_host(["cpu"], simulator=sim, virtual=sim.clock)      # no clock given: the simulator's
    assert on_its_own_clock.clock == sim.clock.now and on_its_own_clock.mark().at == sim.clock.now()
    on_its_own_clock.stop()
    root = server_tree(tmp_path / "powercap")
    monkeypatch.setenv("GPUENERGY_POWERCAP_ROOT", str(root))
    for real in (open_host(["cpu"], simulator=sim, clock=sim.clock.now, virtual=sim.clock), open_host(["cpu"])):
        assert not real.simulated and real.root == root and real.domains == ("cpu",) and real.clock is realtime.perf_counter   # the GPU meter's clock
        assert real._thread is not None
        real.stop()
