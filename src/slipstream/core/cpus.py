"""The CPU cores this process may use: what ``workers="auto"`` and ``slipstream info`` go by.

The rule (``usable_cores``): the cores in this process's CPU affinity mask
(``os.sched_getaffinity(0)``; ``os.cpu_count()`` where the platform has no affinity call), capped
by the cgroup CPU quota when one is set, the quota rounded up to whole cores, and at least 1.
The quota is read from cgroup v2's ``cpu.max`` ("QUOTA PERIOD", or "max PERIOD" for none) or,
failing that, cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (a quota of -1 for none)
under ``cpu/`` or ``cpu,cpuacct/``. It is looked for in the process's own cgroup (named in
``/proc/self/cgroup``: a systemd slice, a Kubernetes pod without a cgroup namespace) and every
cgroup above it up to the root (``/sys/fs/cgroup``: inside a container with its own cgroup
namespace, the container's); the smallest quota set anywhere on that path applies. A missing or
unreadable file means no quota there.
``os.cpu_count()`` counts the machine's cores, which a container or ``taskset`` may not let the
process use.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["cgroup_quota", "usable_cores"]

CGROUP_ROOT = "/sys/fs/cgroup"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = float(quota), float(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _own_paths(proc_cgroup: str | os.PathLike[str]) -> dict[str, str]:
    """This process's cgroup path per hierarchy, from ``/proc/self/cgroup`` ("" for cgroup v2's)."""
    paths: dict[str, str] = {}
    for line in (_read(Path(proc_cgroup)) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2].strip("/")
    return paths


def _upwards(base: Path, own: str) -> list[Path]:
    """``base/own``, then each folder above it, up to ``base`` itself."""
    parts = [p for p in own.split("/") if p and p != ".."]
    return [base.joinpath(*parts[:k]) for k in range(len(parts), -1, -1)]


def _v2(folder: Path) -> tuple[bool, float | None]:
    text = _read(folder / "cpu.max")
    if text is None:
        return False, None
    parts = text.split()
    return True, (_ratio(parts[0], parts[1]) if len(parts) == 2 and parts[0] != "max" else None)


def _v1(folder: Path) -> tuple[bool, float | None]:
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if quota is None or period is None:
        return False, None
    return True, _ratio(quota, period)


def cgroup_quota(root: str | os.PathLike[str] = CGROUP_ROOT, proc_cgroup: str | os.PathLike[str] = "/proc/self/cgroup") -> float | None:
    """The cgroup CPU quota in cores (1.5 for "150000 100000"), or None when none is set or readable
    (see the module doc for where it is looked for)."""
    root, own = Path(root), _own_paths(proc_cgroup)
    found, quotas = False, []
    for folder in _upwards(root, own.get("", "")):  # cgroup v2
        present, quota = _v2(folder)
        found |= present
        if quota is not None:
            quotas.append(quota)
    if not found:
        for name in ("cpu", "cpu,cpuacct"):  # cgroup v1
            for folder in _upwards(root / name, own.get("cpu", "")):
                present, quota = _v1(folder)
                found |= present
                if quota is not None:
                    quotas.append(quota)
            if found:
                break
    return min(quotas) if quotas else None


def usable_cores(root: str | os.PathLike[str] = CGROUP_ROOT, proc_cgroup: str | os.PathLike[str] = "/proc/self/cgroup") -> int:
    """The cores this process may use: its affinity mask, capped by the cgroup CPU quota rounded
    up, at least 1 (see the module doc). ``root``: the cgroup file system's root; ``proc_cgroup``:
    where this process's cgroup is named."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call on this platform (macOS, Windows)
        cores = os.cpu_count() or 1
    quota = cgroup_quota(root, proc_cgroup)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)
