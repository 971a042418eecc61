#!/usr/bin/env bash
# An aarch64 cp311 wheel of slipstream (tools/wheels/manylinux.sh --arch aarch64 --python 3.11) tested on this x86_64
# machine under qemu user emulation: its extensions import and a subset of the suite that exercises the compiled core
# passes.
#
#   tools/wheels/aarch64_check.sh WHEEL [TEST ...]
#
# TEST (paths or node ids relative to the checkout) replaces the default selection, $TESTS below.
#
# Everything reusable lives under $SLIPSTREAM_WHEELS_HOME (default ~/.cache/slipstream-wheels):
# 1. arm64-root/: an arm64 root made once from Debian bookworm's arm64 .debs (CPython 3.11, glibc, libstdc++ and the
#    libraries the standard library links), fetched by `apt-get download` through a private apt configuration under
#    arm64-apt/ (its own sources.list, lists, cache and an empty dpkg status: the system's apt sources, lists and
#    installed packages are left alone) and unpacked with dpkg-deb -x. qemu-user-static is apt-get installed when
#    /usr/bin/qemu-aarch64-static is missing (needs root).
# 2. arm64-site-cp311/: the test dependencies as PyPI's aarch64 cp311 binary wheels (pip download --only-binary=:all:
#    --platform manylinux..._aarch64 --python-version 3.11: numpy, pyarrow, Pillow, tqdm, pytest, pytest-timeout,
#    hypothesis, psutil), unpacked, not installed: the emulated interpreter needs no pip. WHEEL is unpacked into a
#    fresh folder of its own, put ahead of them on PYTHONPATH. arm64-pycache/ keeps the emulated interpreter's
#    bytecode (PYTHONPYCACHEPREFIX: nothing is written into the checkout).
# 3. From a scratch folder outside the checkout, under qemu-aarch64-static -L arm64-root: the three extensions must
#    import from the unpacked wheel, on an aarch64 interpreter; then pytest -p no:cacheprovider runs $TESTS below from
#    the checkout's tests/ with SLIPSTREAM_TEST_INSTALLED=wheel (tests/test_packaging.py: slipstream and every extension
#    come from the wheel, not src/). A child interpreter the tests start (sys.executable) is a wrapper that runs the
#    emulator again: this machine registers no binfmt handler, so an aarch64 executable cannot be exec'd directly.
#
# Prints the wheel's check, pytest's summary and a last line `aarch64_check.sh: PASS ...` or `... FAIL ...`; exit
# status 1 on failure (2 on a wrong argument).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
home=${SLIPSTREAM_WHEELS_HOME:-$HOME/.cache/slipstream-wheels}
die() {
    echo "aarch64_check.sh: FAIL: $*" >&2
    exit 1
}
[ $# -ge 1 ] || { echo "usage: tools/wheels/aarch64_check.sh WHEEL [TEST ...] (WHEEL: an aarch64 cp311 wheel of slipstream)" >&2; exit 2; }
wheel=$(realpath -m "$1")
shift
[ -f "$wheel" ] || { echo "aarch64_check.sh: no wheel at $wheel" >&2; exit 2; }
case $(basename "$wheel") in
slipstream-*-cp311-cp311-*aarch64*.whl) ;;
*) echo "aarch64_check.sh: $(basename "$wheel") is not an aarch64 cp311 wheel of slipstream (Debian bookworm's CPython is 3.11)" >&2; exit 2 ;;
esac

# The tests: those that exercise the compiled core (the JPEG codec and region decoder, the pixel and token kernels,
# packing) and stay within a few minutes under emulation, plus the packaging checks. Measured on a 2-core x86_64 machine
# under qemu 7.2: about 8 minutes in all (pytest 7.5 of them).
TESTS=(
    tests/test_packaging.py
    tests/images/test_codec.py
    tests/images/test_kernels.py
    tests/images/test_roijpeg.py
    tests/images/test_roijpeg_threads.py
    tests/images/test_compiled.py
    tests/images/test_forged_headers.py
    tests/sequences/test_pack.py
    tests/sequences/test_pack_edges.py
    tests/sequences/test_pack_outputs.py
    tests/sequences/test_pack_plan.py
    tests/sequences/test_kernels_threads.py
    tests/sequences/test_mix_exact.py
)
[ $# = 0 ] || TESTS=("$@")
# Deselected: only what needs something this emulated setup lacks, each as "NODE_ID  reason".
DESELECT=(
    # torch is not installed under emulation; the test's own find_spec("torch") skip does not fire, as tests/torch/
    # (no __init__.py) is importable as a namespace package named torch once pytest puts tests/ on sys.path
    "tests/images/test_forged_headers.py::test_a_jpeg_declaring_30000x30000_is_refused_before_anything_is_allocated[device-compiled]  the device stage needs torch"
    "tests/images/test_forged_headers.py::test_a_jpeg_declaring_30000x30000_is_refused_before_anything_is_allocated[device-no-roijpeg]  the device stage needs torch"
    # the index has no aarch64 cp311 wheel of qoi (slipstream[qoi])
    "tests/images/test_forged_headers.py::test_the_bound_holds_for_real_images_of_every_kind  needs qoi"
    "tests/images/test_forged_headers.py::test_what_the_bound_refuses_and_what_it_leaves_to_the_decoder  needs qoi"
)

qemu=/usr/bin/qemu-aarch64-static
root=$home/arm64-root
site=$home/arm64-site-cp311
t_start=$SECONDS

# -- 1. the emulator and the arm64 root -------------------------------------------------------------------------------
if [ ! -x "$qemu" ]; then
    [ "$(id -u)" = 0 ] || die "$qemu is missing: apt-get install qemu-user-static (needs root)"
    apt-get install -y -qq qemu-user-static > /dev/null || die "apt-get could not install qemu-user-static"
fi
# CPython 3.11 and what it and the wheels' extensions link: glibc, libgcc, libstdc++ and the standard library's
# libraries (zlib, bz2, lzma, expat, ffi for ctypes, ssl, sqlite, uuid, readline, crypt); media-types: mimetypes' table
DEBS=(libc6 libgcc-s1 libstdc++6 zlib1g libbz2-1.0 liblzma5 libexpat1 libffi8 libssl3 libsqlite3-0 libuuid1 libncursesw6
    libtinfo6 libreadline8 libcrypt1 media-types libpython3.11-minimal libpython3.11-stdlib python3.11-minimal)
if [ "$(cat "$root/.ready" 2>/dev/null)" != "${DEBS[*]}" ]; then
    t0=$SECONDS
    apt_home=$home/arm64-apt
    rm -rf "$apt_home" "$root"
    mkdir -p "$apt_home/lists/partial" "$apt_home/cache/archives/partial" "$apt_home/debs" "$root"
    echo "deb [arch=arm64] http://deb.debian.org/debian bookworm main" > "$apt_home/sources.list"
    : > "$apt_home/status"
    apt_private=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o "Dir::Etc::SourceList=$apt_home/sources.list"
        -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$apt_home/lists" -o "Dir::Cache=$apt_home/cache"
        -o "Dir::State::status=$apt_home/status" -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
        -o APT::Sandbox::User=root -o Debug::NoLocking=1)
    apt-get "${apt_private[@]}" -qq update > "$apt_home/apt.log" 2>&1 || { cat "$apt_home/apt.log" >&2; die "apt-get update (arm64, bookworm) failed"; }
    (cd "$apt_home/debs" && apt-get "${apt_private[@]}" -qq download "${DEBS[@]}") >> "$apt_home/apt.log" 2>&1 \
        || { cat "$apt_home/apt.log" >&2; die "apt-get download of the arm64 packages failed"; }
    for deb in "$apt_home"/debs/*.deb; do
        dpkg-deb -x "$deb" "$root"
    done
    [ -f "$root/usr/bin/python3.11" ] || die "the arm64 root has no usr/bin/python3.11"
    "$qemu" -L "$root" "$root/usr/bin/python3.11" -c 'import ctypes, lzma, bz2, zlib, ssl, sqlite3, decimal, platform; assert platform.machine() == "aarch64"' \
        || die "the arm64 root's python3.11 does not run under $qemu"
    echo "${DEBS[*]}" > "$root/.ready"
    echo "aarch64_check.sh: made the arm64 root (${#DEBS[@]} Debian bookworm packages) in $((SECONDS - t0)) s"
fi

# -- 2. the test dependencies, and the wheel --------------------------------------------------------------------------
# simplejpeg: the reference test_codec.py checks the extension's libjpeg-turbo against (it is in the test extra)
DEPS=(numpy pyarrow pillow tqdm pytest pytest-timeout hypothesis psutil simplejpeg)
if [ "$(cat "$site/.ready" 2>/dev/null)" != "${DEPS[*]}" ]; then
    t0=$SECONDS
    rm -rf "$site" "$site.wheels"
    mkdir -p "$site" "$site.wheels"
    # bookworm's glibc is 2.36: every manylinux tag up to it
    platforms=(--platform manylinux2014_aarch64)
    for minor in $(seq 17 36); do platforms+=(--platform "manylinux_2_${minor}_aarch64"); done
    python3 -m pip --version > /dev/null 2>&1 || die "python3 on PATH has no pip (pip download fetches the test dependencies)"
    python3 -m pip download -q --only-binary=:all: "${platforms[@]}" --implementation cp --abi cp311 --python-version 3.11 \
        -d "$site.wheels" "${DEPS[@]}" > "$site.log" 2>&1 \
        || { cat "$site.log" >&2; die "pip could not download the aarch64 cp311 test dependencies"; }
    for dep in "$site.wheels"/*.whl; do
        python3 -m zipfile -e "$dep" "$site"
    done
    echo "${DEPS[*]}" > "$site/.ready"
    echo "aarch64_check.sh: unpacked $(ls "$site.wheels" | wc -l) aarch64 cp311 wheels of the test dependencies in $((SECONDS - t0)) s"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/wheel" "$work/run" "$work/bin"
python3 -m zipfile -e "$wheel" "$work/wheel"
# the interpreter a test's child runs (sys.executable, set by the sitecustomize below): the emulator again
printf '#!/bin/sh\nexec %s -L %s %s "$@"\n' "$qemu" "$root" "$root/usr/bin/python3.11" > "$work/bin/python3.11"
chmod +x "$work/bin/python3.11"
cat > "$work/bin/sitecustomize.py" <<'EOF'
"""Under qemu user emulation without a binfmt handler, a child interpreter runs through the emulator's wrapper."""

import os
import sys

sys.executable = os.environ.get("SLIPSTREAM_ARM64_PYTHON", sys.executable)
EOF
export SLIPSTREAM_ARM64_PYTHON=$work/bin/python3.11
export PYTHONPATH=$work/wheel:$site:$work/bin PYTHONPYCACHEPREFIX=$home/arm64-pycache PYTHONNOUSERSITE=1
export SLIPSTREAM_TEST_INSTALLED=wheel
unset PYTHONHOME VIRTUAL_ENV

# -- 3. the extensions, then the tests --------------------------------------------------------------------------------
cd "$work/run"
"$SLIPSTREAM_ARM64_PYTHON" -W error::RuntimeWarning - "$work/wheel" <<'EOF' || die "the wheel's extensions do not import from it on aarch64"
import platform
import sys
from pathlib import Path

import slipstream
import slipstream.images._roijpeg as roi
import slipstream.sequences._mixing as mixing
import slipstream.sequences._packing as packing

wheel = Path(sys.argv[1])
assert platform.machine() == "aarch64", f"the interpreter runs on {platform.machine()}, not aarch64"
for module in (slipstream, roi, packing, mixing):
    assert wheel in Path(module.__file__).parents, f"{module.__name__} comes from {module.__file__}, not the wheel"
print(f"aarch64_check.sh: Python {sys.version.split()[0]} on {platform.machine()}: slipstream and its three extensions"
      f" import from the wheel, libjpeg-turbo {roi.LIBJPEG_TURBO_VERSION_NUMBER}")
EOF
deselect=()
for entry in "${DESELECT[@]}"; do deselect+=(--deselect "${entry%%  *}"); done
tests=()
for path in "${TESTS[@]}"; do tests+=("$repo/$path"); done
status=0
log=$home/arm64-pytest.log
"$SLIPSTREAM_ARM64_PYTHON" -m pytest -p no:cacheprovider -q -rfEs --tb=short --rootdir "$repo" "${deselect[@]}" "${tests[@]}" > "$log" 2>&1 || status=$?
grep -vE '^(\.|s|F|E|x)+ +\[ *[0-9]+%\]$' "$log" | tail -80
summary=$(grep -E "^=* ?[0-9]+ (passed|failed|error|skipped|deselected|xfailed|xpassed).* in [0-9.]+s" "$log" | tail -1 | tr -d "=" | xargs || true)
if [ "$status" != 0 ]; then
    echo "aarch64_check.sh: FAIL: $(basename "$wheel"): pytest under qemu exited $status (${summary:-no summary}), $((SECONDS - t_start)) s in all; its log: $log"
    exit 1
fi
echo "aarch64_check.sh: PASS: $(basename "$wheel"): ${#TESTS[@]} test files under qemu-aarch64 (${summary}), $((SECONDS - t_start)) s in all"
