"""The CPU cores this process may use: what ``workers="auto"`` and ``slipstream info`` go by.

The rule (``usable_cores``): the cores in this process's CPU affinity mask
(``os.sched_getaffinity(0)``; ``os.cpu_count()`` where the platform has no affinity call), capped
by the cgroup CPU quota when one is set, the quota rounded up to whole cores, and at least 1.
The quota is read from cgroup v2's ``cpu.max`` ("QUOTA PERIOD", or "max PERIOD" for none) or,
failing that, cgroup v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (a quota of -1 for none)
under ``cpu/`` or ``cpu,cpuacct/``, all below the cgroup root (``/sys/fs/cgroup``: inside a
container, the container's own cgroup). A missing or unreadable file means no quota.
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


def cgroup_quota(root: str | os.PathLike[str] = CGROUP_ROOT) -> float | None:
    """The cgroup CPU quota in cores (1.5 for "150000 100000"), or None when none is set or readable."""
    root = Path(root)
    text = _read(root / "cpu.max")  # cgroup v2
    if text is not None:
        parts = text.split()
        return _ratio(parts[0], parts[1]) if len(parts) == 2 and parts[0] != "max" else None
    for folder in ("cpu", "cpu,cpuacct"):  # cgroup v1
        quota, period = _read(root / folder / "cpu.cfs_quota_us"), _read(root / folder / "cpu.cfs_period_us")
        if quota is not None and period is not None:
            return _ratio(quota, period)
    return None


def usable_cores(root: str | os.PathLike[str] = CGROUP_ROOT) -> int:
    """The cores this process may use: its affinity mask, capped by the cgroup CPU quota rounded
    up, at least 1 (see the module doc). ``root``: the cgroup file system's root."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call on this platform (macOS, Windows)
        cores = os.cpu_count() or 1
    quota = cgroup_quota(root)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)
