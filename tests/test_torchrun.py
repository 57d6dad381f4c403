"""torchrun: each rank measures its own GPU, every rank sees the total, rank 0 alone saves (end to end, gloo)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from xml.etree import ElementTree

import pytest

from helpers import gpu_info

DDP_TEST = textwrap.dedent(
    """
    import json
    import pytest
    import torch
    import torch.distributed as dist


    @pytest.fixture(scope="session")
    def process_group():
        dist.init_process_group("gloo")
        yield
        dist.destroy_process_group()


    @pytest.mark.energy(work={"flops_tf32": 5e12, "bytes": 2e10, "kernels": 300})
    def test_ddp_step(process_group, gpu_power_cap, energy_meter):
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
        optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
        batch = torch.randn(8, 16)

        def step():                  # every call all-reduces the gradients: ranks must call it alike
            optimiser.zero_grad()
            model(batch).sum().backward()
            optimiser.step()

        energy_meter.measure(step, repeat=2)
        result = energy_meter.result
        with open(f"rank{dist.get_rank()}.json", "w") as out:
            json.dump({"ets_j": result.ets_j, "n": result.n, "cap": gpu_power_cap.gpus[0].gpu_index,
                       "per_gpu": [[g.gpu_index, g.host, g.rank, g.ets_j] for g in result.per_gpu]}, out)
    """
)


@pytest.mark.slow
def test_a_ddp_test_under_torchrun_gives_every_rank_the_total_and_rank_0_saves_it(pytester, monkeypatch):
    pytest.importorskip("torch.distributed.run")
    monkeypatch.setenv("GPUENERGY_SIM_GPUS", "H100,H100")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    pytester.makepyfile(test_ddp=DDP_TEST)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--gpu-caps=80%", "--energy-save",
         "--junitxml=report.xml", "test_ddp.py"],
        cwd=pytester.path, capture_output=True, text=True, timeout=240,    # a deadlock fails here, not for ever
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    ranks = [json.loads((pytester.path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["cap"] == 0 and ranks[1]["cap"] == 1                   # each rank capped its own GPU
    assert ranks[0]["ets_j"] == ranks[1]["ets_j"] > 0                       # the same total on every rank
    for rank in ranks:
        assert [(g[0], g[2]) for g in rank["per_gpu"]] == [(0, 0), (1, 1)]  # both GPUs, in rank order
        assert all(g[1] for g in rank["per_gpu"])                           # with their host
        assert rank["ets_j"] == pytest.approx(sum(g[3] for g in rank["per_gpu"]))
        assert rank["n"] == 2
    (saved,) = (pytester.path / ".energy").rglob("*.json")                 # one document, by rank 0
    cases = json.loads(saved.read_text())["cases"]
    assert [(c["gpu_index"], c["rank"], c["gpu_slot"]) for c in cases] == [(0, 0, 0), (1, 1, 1)]
    assert output.count("gpu energy") == 1                                  # one report
    for name in ("report.xml", "report.rank1.xml"):                         # one JUnit file per rank, none shared
        suite = ElementTree.parse(pytester.path / name).getroot().find("testsuite")
        assert suite is not None and suite.get("tests") == "1" and suite.get("failures") == "0", name
        names = {p.get("name") for p in suite.iter("property")}
        assert {"energy.gpu0.ets_j", "energy.gpu1.ets_j"} <= names, (name, names)   # each rank: both GPUs
    assert [row["current_limit_w"] for row in gpu_info()] == [700.0, 700.0]
