#!/usr/bin/env bash
# A free-threaded (cp313t) wheel of slipstream, with its three C extensions built for CPython 3.13t.
#
#   tools/wheels/freethreaded.sh [--test]
#
# 1. The interpreter: $SLIPSTREAM_FT_HOME/python/bin/python3.13t (default ~/.cache/slipstream-ft), reused
#    when present, else built there from Debian trixie's python3.13 source package with --disable-gil
#    (fetched through a private deb-src list under $SLIPSTREAM_FT_HOME/apt, so the system's apt sources
#    are left alone; build dependencies are apt-get installed when missing and we are root).
# 2. The wheel: tools/wheels/manylinux.sh --python 3.13t builds it from a copy of the working tree into
#    dist/freethreaded/ (or --out DIR): cp313t, manylinux_2_17, libjpeg-turbo static inside, every extension
#    required and checked there.
# 3. The check: a fresh venv of the interpreter installs the wheel (and NumPy's cp313t wheel), imports
#    slipstream and the extensions, and fails unless sys._is_gil_enabled() is still False.
# --test also runs the threaded tests and tests/test_packaging.py against that installed wheel (not src/), on the
#    interpreter as it runs by default (the check above failed if any import had turned the GIL back on).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
home=${SLIPSTREAM_FT_HOME:-$HOME/.cache/slipstream-ft}
out=$repo/dist/freethreaded
run_tests=0
while [ $# -gt 0 ]; do
    case $1 in
    --test) run_tests=1 ;;
    --out) out=$(realpath -m "$2"); shift ;;
    *) echo "freethreaded.sh: unknown argument '$1' (expected --test or --out DIR)" >&2; exit 2 ;;
    esac
    shift
done
py=$home/python/bin/python3.13t
mkdir -p "$home"

if [ ! -x "$py" ]; then
    t0=$SECONDS
    deps=(build-essential pkg-config libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev libreadline-dev libncurses-dev uuid-dev libjpeg62-turbo-dev)
    missing=()
    for d in "${deps[@]}"; do dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q "ok installed" || missing+=("$d"); done
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" != 0 ]; then
            echo "freethreaded.sh: missing build dependencies ${missing[*]}: apt-get install them (needs root)" >&2
            exit 1
        fi
        apt-get update -qq && apt-get install -y -qq "${missing[@]}"
    fi
    src=$home/src
    mkdir -p "$src/apt/lists/partial"
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\n' > "$src/apt/trixie.sources"
    apt_private=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$src/apt" -o "Dir::State::Lists=$src/apt/lists")
    (cd "$src" && apt-get "${apt_private[@]}" -qq update && apt-get "${apt_private[@]}" -qq source --download-only python3.13/trixie)
    tarball=$(ls "$src"/python3.13_*.orig.tar.xz | sort -V | tail -1)
    rm -rf "$src/build" && mkdir -p "$src/build"
    tar -xf "$tarball" -C "$src/build" --strip-components=1
    (cd "$src/build" && ./configure -q --disable-gil --prefix="$home/python" && make -s -j"$(nproc)" && make -s install) > "$src/build.log" 2>&1 \
        || { tail -40 "$src/build.log" >&2; echo "freethreaded.sh: the interpreter's build failed (log: $src/build.log)" >&2; exit 1; }
    echo "freethreaded.sh: built $("$py" -VV | head -1) in $((SECONDS - t0)) s"
fi
"$py" -c 'import sys, sysconfig; assert sysconfig.get_config_var("Py_GIL_DISABLED") == 1, sys.version'

# the build tools, in a venv of the interpreter
venv=$home/venv
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --only-binary :all: setuptools wheel numpy

# the wheel: tools/wheels/manylinux.sh for this interpreter (manylinux_2_17, libjpeg-turbo static inside; it checks
# the three extensions are in it, installs it into a fresh venv with its files extra and needs `slipstream info` to
# say they are active)
t0=$SECONDS
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
SLIPSTREAM_FT_HOME=$home bash "$repo/tools/wheels/manylinux.sh" --python 3.13t --out "$out"
wheel=$(ls -t "$out"/slipstream-*-cp313-cp313t-manylinux*.whl | head -1)
echo "freethreaded.sh: built $wheel in $((SECONDS - t0)) s"

# the check: a fresh venv installs it, imports everything, the GIL stays disabled
check=$tree/check-venv
"$py" -m venv "$check"
"$check/bin/python" -m pip install -q --only-binary :all: numpy
"$check/bin/python" -m pip install -q --no-deps "$wheel"
(cd "$check" && "$check/bin/python" -W error::RuntimeWarning -c '
import sys
import slipstream
from slipstream.images import _roijpeg
from slipstream.sequences import _mixing, _packing
assert not sys._is_gil_enabled(), "importing slipstream enabled the GIL"
print(f"freethreaded.sh: the wheel imports on {sys.version.split()[0]} free-threaded, the GIL disabled; libjpeg-turbo {_roijpeg.LIBJPEG_TURBO_VERSION_NUMBER}")
')

if [ "$run_tests" = 1 ]; then # the threaded tests and the packaging checks against that installed wheel
    "$check/bin/python" -m pip install -q --only-binary :all: "$wheel[files]" pytest pytest-timeout hypothesis psutil
    SLIPSTREAM_TEST_INSTALLED=wheel "$check/bin/python" -m pytest -q -p no:cacheprovider \
        tests/images/test_roijpeg_threads.py tests/sequences/test_kernels_threads.py tests/test_packaging.py
fi
