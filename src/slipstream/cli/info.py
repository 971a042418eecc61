"""``slipstream info``: versions, the cores this process may use, and which fast paths are active.

Optional libraries are looked up by their installed metadata (``importlib.metadata``), never
imported: torch or jax cost seconds to import and are reported only. The compiled pixel kernels
and the region decoder are reported by the modules that use them (``images.kernels.resampler_status``,
``images.pipeline.region_decoder_status``), which import them as slipstream does.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys

import numpy as np

from ..core import buildreport
from ..core.cpus import cgroup_quota, usable_cores
from ..core.version import __version__
from ..images import compiled
from ..images.kernels import resampler_status
from ..images.pipeline import region_decoder_status
from ..sequences.interleave import KERNEL_STATUS as MIXING_STATUS
from ..sequences.packplan import kernels

__all__ = ["info_lines", "installed_version", "libjpeg_turbo_version"]


def installed_version(distribution: str, module: str | None = None) -> str | None:
    """The installed version of ``distribution`` (importable as ``module``), or None; imports nothing."""
    try:
        if importlib.util.find_spec(module or distribution) is None:
            return None
        return importlib.metadata.version(distribution)
    except (ImportError, ValueError, importlib.metadata.PackageNotFoundError):
        return None


def libjpeg_turbo_version() -> str | None:
    """The libjpeg-turbo version JPEG images are coded with: the one the compiled extension was
    built against, else Pillow's (its ``features``), or None (neither, or not libjpeg-turbo)."""
    if compiled.EXTENSION is not None:
        number = int(compiled.EXTENSION.LIBJPEG_TURBO_VERSION_NUMBER)
        return f"{number // 1000000}.{number // 1000 % 1000}.{number % 1000}"
    try:
        from PIL import features

        return features.version("libjpeg_turbo")
    except (ImportError, ValueError):
        return None


def _cores() -> str:
    try:
        affinity = f"{len(os.sched_getaffinity(0))} in the affinity mask"
    except (AttributeError, OSError):
        affinity = "no affinity call here"
    quota = cgroup_quota()
    limit = "no cgroup CPU quota" if quota is None else f"cgroup CPU quota {quota:g}"
    return f"{usable_cores()} ({affinity}, {limit}; os.cpu_count() {os.cpu_count()}): workers='auto' uses this"


def _compiled_core() -> str:
    """The three C extensions: active, or why not (the build's reason when it left one), and how to get them."""
    statuses = {"images._roijpeg": compiled.STATUS, "sequences._packing": kernels()[1], "sequences._mixing": MIXING_STATUS}
    statuses = {name: buildreport.not_built(f"slipstream.{name}") if status == "not built" else status for name, status in statuses.items()}
    if all(status == "active" for status in statuses.values()):
        libjpeg = {"static": " (libjpeg-turbo linked in)", "system": " (the system's libjpeg)"}.get(buildreport.read().get("libjpeg"), "")
        return f"active: images._roijpeg{libjpeg}, sequences._packing, sequences._mixing"
    text = "; ".join(f"{name} {status}" for name, status in statuses.items())
    if any(status.startswith(("not built", "failed")) for status in statuses.values()):
        text += (
            ". To get them: pip install --force-reinstall --only-binary slipstream slipstream (the binary wheel), or install"
            " gcc and libjpeg62-turbo-dev and reinstall from source (pip install -v shows why a build skipped one)"
        )
    return text


def _pixel_kernels() -> str:
    status = resampler_status()
    if status == "active":
        return "active (images._roijpeg): crop + resize + flip + layout run compiled, without the GIL"
    return f"{status}: the NumPy reference resamples, about 15x slower"


def _region_decoder() -> str:
    status = region_decoder_status()
    if status == "active":
        return "active (images._roijpeg): JPEGs decode only the rows and columns a crop reads"
    return f"{status}: JPEGs decode whole, then crop"


def _token_kernels() -> str:
    packing = kernels()[1]
    if packing == MIXING_STATUS == "active":
        return "active (sequences._packing, _mixing): packing plans, row gathers and mixtures run compiled, without the GIL"
    return f"packing {packing}, mixing {MIXING_STATUS}: NumPy gives the same rows and mixtures, slower"


def _jpeg_codec() -> str:
    turbo = libjpeg_turbo_version()
    if compiled.EXTENSION is not None:
        return f"libjpeg-turbo {turbo} via images._roijpeg (compiled, without the GIL)"
    version = installed_version("Pillow", "PIL")
    if version is None:
        return f"missing: the compiled extension is {compiled.STATUS} and Pillow is not installed; pip install 'slipstream[files]'"
    return f"libjpeg-turbo {turbo or '(version not found)'} via Pillow {version} (the compiled extension is {compiled.STATUS})"


def _optional(distribution: str, module: str | None = None, missing: str = "not installed") -> str:
    version = installed_version(distribution, module)
    return missing if version is None else version


def info_lines() -> list[str]:
    """The lines ``slipstream info`` prints."""
    rows = [
        ("slipstream", __version__),
        ("python", f"{platform.python_version()} ({platform.python_implementation()}, {sys.platform})"),
        ("numpy", np.__version__),
        ("usable cores", _cores()),
        ("compiled core", _compiled_core()),
        ("pixel kernels", _pixel_kernels()),
        ("region JPEG decoder", _region_decoder()),
        ("token kernels", _token_kernels()),
        ("JPEG decoding", _jpeg_codec()),
        ("pyarrow", _optional("pyarrow", missing="not installed: packed files need it; pip install 'slipstream[files]'")),
        ("torch", _optional("torch")),
        ("jax", _optional("jax")),
    ]
    width = max(len(name) for name, _ in rows)
    return [f"{name.ljust(width)}  {value}" for name, value in rows]


def run() -> int:
    print("\n".join(info_lines()))
    return 0
