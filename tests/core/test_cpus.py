"""usable_cores: the affinity mask capped by the cgroup CPU quota (v1 and v2), rounded up, at least 1."""

import os

import pytest

from slipstream.core import cpus
from slipstream.core.cpus import cgroup_quota, usable_cores


@pytest.fixture
def eight_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)


def _v2(root, text):
    (root / "cpu.max").write_text(text + "\n")


def _v1(root, quota, period, folder="cpu"):
    (root / folder).mkdir()
    (root / folder / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (root / folder / "cpu.cfs_period_us").write_text(f"{period}\n")


def test_no_cgroup_files_means_the_affinity_mask(tmp_path, eight_cores):
    assert cgroup_quota(tmp_path) is None
    assert usable_cores(tmp_path) == 8  # not os.cpu_count()'s 64


@pytest.mark.parametrize(
    "text, expected", [("150000 100000", 2), ("200000 100000", 2), ("50000 100000", 1), ("max 100000", 8), ("3200000 100000", 8), ("garbage", 8)]
)
def test_cgroup_v2_quota_caps_and_rounds_up(tmp_path, eight_cores, text, expected):
    _v2(tmp_path, text)
    assert usable_cores(tmp_path) == expected


@pytest.mark.parametrize("folder", ["cpu", "cpu,cpuacct"])
@pytest.mark.parametrize("quota, period, expected", [(250000, 100000, 3), (-1, 100000, 8), (1600000, 100000, 8), (1000, 100000, 1)])
def test_cgroup_v1_quota_caps_and_rounds_up(tmp_path, eight_cores, folder, quota, period, expected):
    _v1(tmp_path, quota, period, folder)
    assert usable_cores(tmp_path) == expected


def test_v2_is_read_before_v1(tmp_path, eight_cores):
    _v2(tmp_path, "100000 100000")
    _v1(tmp_path, 500000, 100000)
    assert cgroup_quota(tmp_path) == 1.0 and usable_cores(tmp_path) == 1


def test_a_v1_folder_with_one_file_missing_is_no_quota(tmp_path, eight_cores):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    assert usable_cores(tmp_path) == 8


def test_a_small_affinity_mask_wins_over_a_large_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    _v2(tmp_path, "400000 100000")
    assert usable_cores(tmp_path) == 1


def test_without_an_affinity_call_os_cpu_count_is_used(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert usable_cores(tmp_path) == 6
    _v2(tmp_path, "250000 100000")
    assert usable_cores(tmp_path) == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    (tmp_path / "cpu.max").unlink()
    assert usable_cores(tmp_path) == 1


def test_the_default_root_is_the_system_cgroup_root():
    assert cpus.CGROUP_ROOT == "/sys/fs/cgroup"
    assert 1 <= usable_cores() <= (os.cpu_count() or 1)


def test_the_quota_of_the_process_own_cgroup_and_those_above_it_counts(tmp_path, eight_cores):
    """A systemd slice or a pod without a cgroup namespace: the quota sits on the process's own
    cgroup (named in /proc/self/cgroup), or above it; the smallest on the way up applies."""
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/kubepods/pod1/app\n")
    root = tmp_path / "fs"
    (root / "kubepods" / "pod1" / "app").mkdir(parents=True)
    _v2(root, "max 100000")
    _v2(root / "kubepods" / "pod1" / "app", "max 100000")
    _v2(root / "kubepods" / "pod1", "250000 100000")
    assert cgroup_quota(root, proc) == 2.5 and usable_cores(root, proc) == 3
    _v2(root / "kubepods" / "pod1" / "app", "120000 100000")
    assert usable_cores(root, proc) == 2


def test_cgroup_v1_paths_come_from_the_cpu_controllers_line(tmp_path, eight_cores):
    proc = tmp_path / "proc-cgroup"
    proc.write_text("12:memory:/job\n4:cpu,cpuacct:/job\n0::/\n")
    root = tmp_path / "fs"
    (root / "cpu,cpuacct" / "job").mkdir(parents=True)
    (root / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu,cpuacct" / "cpu.cfs_period_us").write_text("100000\n")
    (root / "cpu,cpuacct" / "job" / "cpu.cfs_quota_us").write_text("300000\n")
    (root / "cpu,cpuacct" / "job" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cores(root, proc) == 3
