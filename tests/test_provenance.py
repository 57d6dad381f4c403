"""Provenance (pytest_gpuenergy/runs/provenance.py): the machine and the git commit written into every
run document.

These tests exist for the mutation testing of runs/ (benchmarks/mutation.py): the ``machine`` and
``commit`` objects are read by people and scripts outside the project (docs/run-format.md), so
their keys, their values and the cases where git cannot answer are pinned exactly. Git runs for
real, in a repository made in ``tmp_path``; the rest uses stand-in backends and GPUs.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_gpuenergy.runs import provenance
from pytest_gpuenergy.runs.provenance import collect_commit_info, collect_machine_info

BRANCH_ENV = ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME")


class Limits(SimpleNamespace):
    default_mw: int
    min_mw: int
    max_mw: int


class Gpu:
    def __init__(self, index: int, name: str, uuid: str, limits: Limits | None) -> None:
        self.index, self.name, self.uuid, self._limits = index, name, uuid, limits

    def limits(self) -> Limits:
        if self._limits is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self._limits


def backend(cuda_version="12.4", **attributes):
    return SimpleNamespace(**({"name": "nvml", "simulated": False, "driver_version": "550.54.15",
                               "cuda_driver_version": cuda_version} | attributes))


@pytest.fixture
def no_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)


# -- the machine -------------------------------------------------------------------------------------

def test_the_machine_description_names_host_software_and_each_gpus_limits_in_watts(no_torch):
    gpus = [Gpu(0, "NVIDIA H100 80GB HBM3", "GPU-aaa", Limits(default_mw=700_000, min_mw=200_000, max_mw=750_000)),
            Gpu(3, "NVIDIA H100 80GB HBM3", "GPU-bbb", Limits(default_mw=650_500, min_mw=100_000, max_mw=700_000))]
    info = collect_machine_info(backend(), gpus)
    assert info == {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "backend": "nvml",
        "simulated": False,
        "driver": "550.54.15",
        "cuda_driver": "12.4",
        "cuda": None,                 # torch was not imported by the tests
        "torch": importlib.metadata.version("torch"),
        "pytest_gpuenergy": importlib.metadata.version("pytest-gpuenergy"),
        "gpus": [
            {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aaa",
             "default_limit_w": 700.0, "min_limit_w": 200.0, "max_limit_w": 750.0},
            {"index": 3, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-bbb",
             "default_limit_w": 650.5, "min_limit_w": 100.0, "max_limit_w": 700.0},
        ],
    }


def test_a_gpu_that_cannot_report_its_limits_is_still_described(no_torch):
    info = collect_machine_info(backend(), [Gpu(1, "Tesla V100-SXM2-32GB", "GPU-ccc", None)])
    assert info["gpus"] == [{"index": 1, "name": "Tesla V100-SXM2-32GB", "uuid": "GPU-ccc"}]


def test_a_simulated_backend_is_labelled_simulated(no_torch):
    info = collect_machine_info(backend(name="sim", simulated=True, driver_version="sim-1.0"), [])
    assert (info["backend"], info["simulated"], info["driver"], info["gpus"]) == ("sim", True, "sim-1.0", [])


def test_a_backend_that_says_nothing_gives_nulls_and_is_not_simulated(no_torch):
    info = collect_machine_info(object(), [])
    assert {k: info[k] for k in ("backend", "simulated", "driver", "cuda_driver")} == {
        "backend": None, "simulated": False, "driver": None, "cuda_driver": None}


def test_the_cuda_torch_was_built_with_is_read_only_when_the_tests_imported_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(version=SimpleNamespace(cuda="12.1")))
    assert collect_machine_info(backend(), [])["cuda"] == "12.1"
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(version=SimpleNamespace(cuda=None)))   # a CPU build
    assert collect_machine_info(backend(), [])["cuda"] is None
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace())
    assert collect_machine_info(backend(), [])["cuda"] is None


def test_a_distribution_that_is_not_installed_has_no_version(no_torch, monkeypatch):
    def version(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    info = collect_machine_info(backend(), [])
    assert (info["torch"], info["pytest_gpuenergy"]) == (None, None)


def test_the_cuda_version_the_driver_supports_comes_from_the_backend(no_torch):
    """How NVML's 12040 reads as 12.4 is tested with the NVML module (tests/test_device.py)."""
    assert collect_machine_info(backend(cuda_version="13.0"), [])["cuda_driver"] == "13.0"
    assert collect_machine_info(backend(cuda_version=None), [])["cuda_driver"] is None


# -- the commit --------------------------------------------------------------------------------------

def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    for name in BRANCH_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    path = tmp_path / "project"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "tracked.txt").write_text("one\n")
    git(path, "add", "tracked.txt")
    git(path, "commit", "-q", "-m", "first")
    return path


def test_a_clean_checkout_gives_the_commit_id_branch_and_not_dirty(repo):
    (repo / "new-run.json").write_text("{}")       # untracked files (the document being written) do not count
    assert collect_commit_info(repo) == {"id": git(repo, "rev-parse", "HEAD"), "branch": "main", "dirty": False}
    assert len(collect_commit_info(str(repo))["id"]) == 40


def test_a_changed_tracked_file_makes_the_checkout_dirty(repo):
    (repo / "tracked.txt").write_text("two\n")
    assert collect_commit_info(repo) == {"id": git(repo, "rev-parse", "HEAD"), "branch": "main", "dirty": True}


def test_reading_the_commit_never_rewrites_the_repositorys_index(repo):
    # A file touched but unchanged makes git refresh its index on "status" unless optional locks are off:
    # reading provenance must not write into the user's repository (or race a git command there).
    os.utime(repo / "tracked.txt", (1_000_000_000, 1_000_000_000))
    index = (repo / ".git" / "index").read_bytes()
    assert collect_commit_info(repo)["dirty"] is False
    assert (repo / ".git" / "index").read_bytes() == index


def test_a_branch_checked_out_wins_over_the_ci_variables(repo, monkeypatch):
    git(repo, "checkout", "-q", "-b", "feature/fast-path")
    monkeypatch.setenv("GITHUB_HEAD_REF", "other")
    assert collect_commit_info(repo)["branch"] == "feature/fast-path"


@pytest.mark.parametrize(("env", "expected"), [
    ({"GITHUB_HEAD_REF": "feature/x", "GITHUB_REF_NAME": "42/merge", "CI_COMMIT_REF_NAME": "gl"}, "feature/x"),
    ({"GITHUB_HEAD_REF": "", "GITHUB_REF_NAME": "main", "CI_COMMIT_REF_NAME": "gl"}, "main"),   # a push: head ref empty
    ({"CI_COMMIT_REF_NAME": "release-2"}, "release-2"),
    ({"GITHUB_REF_NAME": "", "CI_COMMIT_REF_NAME": ""}, None),
    ({}, None),
])
def test_a_detached_checkout_takes_its_branch_from_the_ci_variables(repo, monkeypatch, env, expected):
    git(repo, "checkout", "-q", "--detach")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert collect_commit_info(repo) == {"id": git(repo, "rev-parse", "HEAD"), "branch": expected, "dirty": False}


def test_a_repository_without_a_work_tree_has_a_commit_but_no_dirty_state(repo, tmp_path):
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True, capture_output=True)
    assert collect_commit_info(bare) == {"id": git(repo, "rev-parse", "HEAD"), "branch": "main", "dirty": None}


def test_outside_git_or_in_a_folder_that_cannot_be_entered_there_is_no_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    assert collect_commit_info(plain) is None
    assert collect_commit_info(tmp_path / "missing") is None       # OSError
    assert collect_commit_info("bad\0name") is None                 # ValueError
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    assert collect_commit_info(empty) is None                        # no commit yet


def test_a_git_that_hangs_is_given_up_after_its_timeout(repo, monkeypatch):
    monkeypatch.setattr(provenance, "_GIT_TIMEOUT_S", 1e-6)
    assert collect_commit_info(repo) is None


def test_git_gets_five_seconds_per_call_so_a_stuck_git_cannot_stall_a_session(repo, monkeypatch):
    seen = []
    real_run = subprocess.run

    def spy(*args, **kwargs):
        seen.append(kwargs.get("timeout"))
        return real_run(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    assert collect_commit_info(repo) is not None
    assert seen == [5.0, 5.0, 5.0]
