"""Builds the optional C extensions; everything else is in pyproject.toml.

``slipstream.images._roijpeg`` is slipstream's compiled image code (``src/slipstream/images/csrc``):
region-of-interest JPEG decoding with libjpeg-turbo's libjpeg API (``jpeg_crop_scanline`` /
``jpeg_skip_scanlines``), whole-image JPEG decode and encode, Pillow's resampling, and whole image tasks
(decode, crop, resize, mirror, lay out a chunk of a batch in one call without the GIL). It needs a C
compiler and the libjpeg headers (Debian: ``libjpeg62-turbo-dev``); when either is missing the build is
skipped and slipstream decodes whole images with Pillow and resamples with NumPy instead (same pixels,
slower).

``slipstream.sequences._packing`` and ``_mixing`` (``src/slipstream/sequences/csrc``) are the
token-sequence kernels: packing plans, row gathers into the batch, mixture interleaves. They need a
C compiler only; without one NumPy gives the same results, slower.

A skipped extension does not fail the install: a banner on stderr names it, the reason (no compiler,
jpeglib.h missing, the compiler's last lines), what is slower and how to fix it, and the build writes
the same to ``slipstream/_build.json`` in the package (``slipstream info`` and the first image pipeline
read it). pip shows the banner only with ``pip install -v``.

Environment variables (the binary wheels' build, ``tools/wheels/manylinux.sh``, sets both):

- ``SLIPSTREAM_JPEG_STATIC=DIR``: ``_roijpeg`` compiles against ``DIR/include`` and links
  ``DIR/lib/libjpeg.a`` (or ``DIR/libjpeg.a``) into itself instead of ``-ljpeg`` (build that library with
  ``-fvisibility=hidden`` so that the extension does not export libjpeg's symbols).
- ``SLIPSTREAM_REQUIRE_EXTENSIONS=1``: every extension is required; the build fails rather than skipping one.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.errors import CCompilerError, DistutilsError
except ImportError:  # an older setuptools
    from distutils.errors import CCompilerError, DistutilsError

REPORT = "_build.json"  # in the slipstream package: which extensions were built, and why not
REQUIRED = os.environ.get("SLIPSTREAM_REQUIRE_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no", "off")

# the module's file and every C file under csrc/ (sorted: the same build order everywhere)
SOURCES = ["_roijpeg.c"] + sorted(f"csrc/{path.name}" for path in Path("src/slipstream/images/csrc").glob("*.c"))
# the token-sequence kernels need no library: they build wherever a C compiler is
SEQUENCES = {"_packing": ["csrc/packing.c", "csrc/packplan.c", "csrc/packrows.c"], "_mixing": ["csrc/mixing.c", "csrc/mixsim.c", "csrc/feistel.c"]}

# what a user loses without each extension, and what to install to get it
LOSES = {
    "slipstream.images._roijpeg": (
        "region JPEG decoding, the C resampler and whole-batch image tasks: slipstream decodes whole JPEGs "
        "with Pillow and resamples with NumPy instead (the same pixels, several times slower)",
        "a C compiler and the libjpeg-turbo headers (Debian/Ubuntu: apt-get install gcc libjpeg62-turbo-dev)",
    ),
    "slipstream.sequences._packing": (
        "compiled packing plans and row gathers: NumPy gives the same rows, slower",
        "a C compiler (Debian/Ubuntu: apt-get install gcc)",
    ),
    "slipstream.sequences._mixing": (
        "compiled mixture interleaves: NumPy gives the same mixtures, slower",
        "a C compiler (Debian/Ubuntu: apt-get install gcc)",
    ),
}


def jpeg_options() -> dict:
    """How ``_roijpeg`` finds libjpeg: the system's (``-ljpeg``), or ``SLIPSTREAM_JPEG_STATIC``'s static library."""
    root = os.environ.get("SLIPSTREAM_JPEG_STATIC", "").strip()
    if not root:
        return {"libraries": ["jpeg", "pthread"]}
    archive = next((path for path in (Path(root, "lib", "libjpeg.a"), Path(root, "libjpeg.a")) if path.is_file()), None)
    if archive is None or not Path(root, "include", "jpeglib.h").is_file():
        sys.exit(f"setup.py: SLIPSTREAM_JPEG_STATIC={root} must hold include/jpeglib.h and lib/libjpeg.a (or libjpeg.a)")
    return {
        "include_dirs": [str(Path(root, "include"))],
        "extra_objects": [str(archive)],
        "libraries": ["pthread"],
    }


def reason(error: BaseException, output: str, command: str) -> str:
    """Why an extension failed to build, in a few words, from the exception and the compiler's output."""
    chain, link = [], error
    while link is not None and len(chain) < 8:  # the exception, what it was raised from or while handling
        chain.append(link)
        link = link.__cause__ or link.__context__
    text = " ".join(str(link) for link in chain)
    lowered = output.lower()
    if any(isinstance(link, (FileNotFoundError, PermissionError)) for link in chain) or shutil.which(command) is None:
        return f"no C compiler: {command!r} was not found"
    if "jpeglib.h" in output:
        return "the libjpeg headers are missing (jpeglib.h not found)"
    if "python.h" in lowered:
        return "the Python headers are missing (Python.h not found)"
    if "-ljpeg" in output:
        return "libjpeg is missing (the linker cannot find -ljpeg)"
    last = [line.strip() for line in output.splitlines() if "error" in line.lower()]
    return f"the compiler failed: {last[-1] if last else ' '.join(text.split())}"


class ReportingBuildExt(build_ext):
    """``build_ext`` that records each extension's outcome, explains skipped ones on stderr and writes ``REPORT``."""

    def run(self) -> None:
        self._outcomes: dict = {}
        self._captured = threading.local()
        super().run()
        report = {"extensions": {ext.name: self._outcomes.get(ext.name, {"built": True}) for ext in self.extensions}}
        report["libjpeg"] = "static" if os.environ.get("SLIPSTREAM_JPEG_STATIC", "").strip() else "system"
        targets = [Path(self.build_lib, "slipstream")]
        if self.inplace:
            targets.append(Path(self.get_finalized_command("build_py").get_package_dir("slipstream")))
        for folder in targets:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / REPORT).write_text(json.dumps(report, indent=1) + "\n")
        failed = {name: outcome for name, outcome in report["extensions"].items() if not outcome["built"]}
        if failed:
            sys.stderr.write(banner(failed))

    def build_extensions(self) -> None:
        runner = "call" if hasattr(self.compiler, "call") else "spawn"  # setuptools >= 80 runs commands with call()
        setattr(self.compiler, runner, self._capturing(getattr(self.compiler, runner)))
        super().build_extensions()

    def _capturing(self, run):
        """``run`` (the compiler's command runner) with the command's output echoed to stderr and kept for ``reason``."""

        def wrapped(cmd, **kwargs):
            self._captured.command = os.fspath(cmd[0])
            with tempfile.TemporaryFile("w+", errors="replace") as log:
                try:
                    run(cmd, stdout=log, stderr=subprocess.STDOUT, **kwargs)
                finally:
                    log.seek(0)
                    output = log.read()
                    sys.stderr.write(output)
                    self._captured.output = getattr(self._captured, "output", "") + output

        return wrapped

    def build_extension(self, ext) -> None:
        self._captured.output, self._captured.command = "", "cc"
        try:
            super().build_extension(ext)
        except (CCompilerError, DistutilsError) as error:
            output = self._captured.output
            self._outcomes[ext.name] = {
                "built": False,
                "reason": reason(error, output, self._captured.command),
                "errors": [line for line in output.splitlines() if line.strip()][-8:],
            }
            raise  # setuptools skips an optional extension (with a warning) and fails on a required one


def banner(failed: dict) -> str:
    """The multi-line notice for the extensions that were not built."""
    rule = "=" * 100
    lines = ["", rule, "slipstream: some C extensions were NOT built; slipstream works without them, slower.", ""]
    for name, outcome in failed.items():
        loses, needs = LOSES.get(name, ("its compiled code", "a C compiler"))
        lines += [f"  {name}: not built", f"    reason: {outcome['reason']}"]
        lines += [f"    compiler: {line}" for line in outcome["errors"][-4:]]
        lines += [f"    without it: {loses}", f"    to build it: {needs}", ""]
    lines += [
        "  To get every fast path: install slipstream's binary wheel (pip install --only-binary slipstream slipstream),",
        "  or install what is missing above and reinstall from source (pip install -v --no-binary slipstream slipstream,",
        "  or pip install -v -e . in a checkout). `slipstream info` shows what is active; the reasons are in slipstream/_build.json.",
        rule,
        "",
    ]
    return "\n".join(lines)


setup(
    cmdclass={"build_ext": ReportingBuildExt},
    ext_modules=[
        Extension(
            "slipstream.images._roijpeg",
            [f"src/slipstream/images/{name}" for name in SOURCES],
            optional=not REQUIRED,
            # no fused multiply-add: the resampling weights must round as Pillow's and NumPy's do
            extra_compile_args=["-O3", "-std=c99", "-ffp-contract=off"],
            **jpeg_options(),
        )
    ]
    + [
        Extension(
            f"slipstream.sequences.{name}",
            [f"src/slipstream/sequences/{path}" for path in paths],
            optional=not REQUIRED,
            extra_compile_args=["-O3", "-std=c99"],
        )
        for name, paths in SEQUENCES.items()
    ],
)
