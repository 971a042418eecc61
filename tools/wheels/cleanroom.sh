#!/usr/bin/env bash
# Install a built slipstream wheel on a machine without a compiler or libjpeg, and check every fast path is active.
#
#   tools/wheels/cleanroom.sh WHEEL [--bench] [--rounds N] [--bench-args "ARGS"] [--host-python PATH]
#
# The clean room: a minimal Debian bookworm chroot (debootstrap --variant=minbase --include=python3,python3-venv;
# Python 3.11, so a cp311 wheel), made once under $SLIPSTREAM_CLEANROOM_HOME (default /var/cache/slipstream-cleanroom)
# from the mirror apt uses here. Before anything is installed the script asserts that it has no gcc, cc, c++, g++ or
# clang, no libjpeg/turbojpeg headers under /usr/include and no libjpeg.so* or libturbojpeg.so* file at all.
#
# The install: a fresh venv in the chroot pip installs WHEEL[files] from the local wheel folders and indexes this
# machine's pip is configured with (`pip config list`: find-links, index-url, extra-index-url, constraint), which
# are bind-mounted read-only at the same paths; the chroot's /etc/pip.conf names only those (file:// indexes; any
# network index is dropped), and every command in the chroot runs without a network (unshare --net).
# From / (so no checkout is importable) it imports slipstream.images._roijpeg, slipstream.sequences._packing and
# slipstream.sequences._mixing, runs `slipstream info` and requires its pixel kernels, region JPEG decoder and token
# kernels rows to say "active" (and no row to say "not built", "failed to import" or "disabled"). An extension that
# does not load is reported with what `ldd` finds missing inside the chroot. Exit status 1 when any check fails.
#
# --bench (only when every check passed): benchmarks/bench_images.py with --bench-args (default "--quick --no-ffcv")
# runs N rounds (--rounds, default 3) of host then chroot, in the same sitting: the host run uses --host-python
# (default .venv/bin/python of this checkout, the source build) from the checkout; the chroot run uses the venv with
# torch and scikit-image added at the host's versions, from a copy of benchmarks/. Both read the same image cache
# (bind-mounted). It prints each run's slipstream img/s (rows 3, 4 and 3f) and the ratio of medians chroot / host.
#
# Mounts are made only inside a private mount namespace per chroot command (unshare --mount), so they vanish with it,
# and are also unmounted by an EXIT trap there; the host's mount table is checked for strays on exit. Needs root.
set -euo pipefail
self=$(realpath "$0")

usage() {
    sed -n '3p' "$self" | sed 's/^# *//' >&2
}

die() {
    echo "cleanroom.sh: $*" >&2
    exit 2
}

# -- inside a private mount namespace: mount, chroot, run one command ------------------------------------------------
if [ "${1:-}" = "--__enter" ]; then
    root=$2 bindlist=$3 cmd=$4
    mounted=()
    cleanup_mounts() {
        local k
        for ((k = ${#mounted[@]} - 1; k >= 0; k--)); do umount -R "${mounted[k]}" 2>/dev/null || umount -l "${mounted[k]}" || true; done
    }
    trap cleanup_mounts EXIT
    mnt() { # mount ... TARGET, remembered for the trap
        mount "$@"
        mounted+=("${@: -1}")
    }
    mount --make-rprivate /
    mnt -t proc proc "$root/proc"
    mnt --bind /dev "$root/dev"
    mnt -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
    mnt --rbind /sys "$root/sys"
    while IFS='|' read -r src mode; do
        [ -n "$src" ] || continue
        mkdir -p "$root$src"
        mnt --bind "$src" "$root$src"
        if [ "$mode" = ro ]; then mount -o remount,bind,ro "$root$src"; fi
    done < "$bindlist"
    set +e
    chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 TMPDIR=/tmp PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 /bin/bash -c "$cmd"
    rc=$?
    set -e
    exit $rc
fi

# -- arguments -------------------------------------------------------------------------------------------------------
wheel="" bench=0 rounds=3 bench_args="--quick --no-ffcv" host_python=""
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) usage; exit 0 ;;
    --bench) bench=1 ;;
    --rounds)
        [ $# -ge 2 ] || die "--rounds needs a number"
        [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--rounds needs a positive whole number, not '$2'"
        rounds=$2; shift ;;
    --bench-args)
        [ $# -ge 2 ] || die "--bench-args needs a string"
        bench_args=$2; shift ;;
    --host-python)
        [ $# -ge 2 ] || die "--host-python needs a path"
        host_python=$2; shift ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *)
        [ -z "$wheel" ] || die "one wheel at a time (got '$wheel' and '$1')"
        wheel=$1 ;;
    esac
    shift
done
[ -n "$wheel" ] || { usage; die "no wheel given"; }
[ -f "$wheel" ] || die "no such file: $wheel"
wheel=$(realpath "$wheel")
wheel_name=$(basename "$wheel")
[[ $wheel_name =~ ^slipstream-[^-]+-(cp[0-9]+)-[^-]+-[^-]+\.whl$ ]] || die "not a slipstream CPython wheel: $wheel_name"
wheel_tag=${BASH_REMATCH[1]}
repo=$(cd "$(dirname "$0")/../.." && pwd)
host_python=${host_python:-$repo/.venv/bin/python}
if [ "$bench" = 1 ]; then
    [ -x "$host_python" ] || die "--bench needs the source build's Python: no $host_python (--host-python PATH)"
fi
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts)"
for tool in unshare chroot mount umount; do command -v "$tool" > /dev/null || die "needs $tool"; done

home=${SLIPSTREAM_CLEANROOM_HOME:-/var/cache/slipstream-cleanroom}
root=$home/bookworm-minbase
work=$(mktemp -d /tmp/slipstream-cleanroom.XXXXXX)
bindlist=$work/binds
: > "$bindlist"

stray_mounts() {
    awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts
}
on_exit() {
    local m
    for m in $(stray_mounts | sort -r); do umount -l "$m" 2>/dev/null || true; done
    if [ -n "$(stray_mounts)" ]; then echo "cleanroom.sh: mounts left under $root: $(stray_mounts | tr '\n' ' ')" >&2; fi
    rm -rf "$work"
}
trap on_exit EXIT

# a folder under $root is removed only while nothing is mounted there (rm never follows a bind mount into the host)
remove_in_root() {
    local path=$1
    [ -n "$(stray_mounts)" ] && die "refusing to remove $path: mounts under $root"
    rm -rf --one-file-system "$path"
}

# -- the chroot, made once -------------------------------------------------------------------------------------------
apt_mirror() {
    local uri
    uri=$(awk '/^URIs:/ { u = $2 } /^Suites:/ && / bookworm( |$)/ && u != "" { print u; exit }' /etc/apt/sources.list.d/*.sources 2> /dev/null || true)
    [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2> /dev/null || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

if [ ! -f "$root/.cleanroom-complete" ]; then
    mkdir -p "$home"
    command -v debootstrap > /dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
    mirror=$(apt_mirror)
    echo "cleanroom.sh: making the chroot $root (debootstrap minbase bookworm from $mirror; once) ..."
    [ -n "$(awk -v r="$root.partial" 'index($2, r) == 1' /proc/self/mounts)" ] && die "mounts left under $root.partial"
    rm -rf --one-file-system "$root.partial"
    debootstrap --variant=minbase --include=python3,python3-venv bookworm "$root.partial" "$mirror" > "$home/debootstrap.log" 2>&1 \
        || { tail -20 "$home/debootstrap.log" >&2; die "debootstrap failed (log: $home/debootstrap.log)"; }
    mv "$root.partial" "$root"
    echo "debootstrap --variant=minbase --include=python3,python3-venv bookworm $root $mirror ($(date -u +%FT%TZ))" > "$root/.cleanroom-complete"
fi
[ -z "$(stray_mounts)" ] || die "mounts under $root from an earlier run: $(stray_mounts | tr '\n' ' ')"

fail=0
check() { # check OK|FAIL message
    echo "  $1  $2"
    [ "$1" = OK ] || fail=1
}

jpeg_files() { # libjpeg/libturbojpeg shared objects anywhere in the chroot (the venv included)
    find "$root" -xdev \( -name 'libjpeg.so*' -o -name 'libturbojpeg.so*' \) -print 2> /dev/null | sed "s|^$root||"
}

echo "clean room: $root ($(cut -d' ' -f1-6 "$root/.cleanroom-complete"))"
remove_in_root "$root/cleanroom"
for tool in gcc cc c++ g++ clang; do
    found=$(chroot "$root" /bin/sh -c "command -v $tool" || true)
    if [ -n "$found" ]; then check FAIL "the chroot has $tool ($found)"; else check OK "no $tool"; fi
done
headers=$(cd "$root" && ls usr/include/jpeglib.h usr/include/turbojpeg.h usr/include/*/jconfig.h 2> /dev/null || true)
if [ -n "$headers" ]; then check FAIL "libjpeg headers in the chroot: $headers"; else check OK "no libjpeg headers (/usr/include/jpeglib.h absent)"; fi
libs=$(jpeg_files)
if [ -n "$libs" ]; then check FAIL "libjpeg in the chroot: $libs"; else check OK "no libjpeg.so* or libturbojpeg.so* anywhere"; fi
room_python=$(chroot "$root" python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
[ "$room_python" = "$wheel_tag" ] || die "the wheel is for $wheel_tag, the clean room's Python 3 is $room_python"
[ "$fail" = 0 ] || { echo "cleanroom.sh: the chroot is not clean; remove $root to make it again" >&2; exit 1; }

# -- pip's local wheels, as this machine is configured -----------------------------------------------------------------
pip_py=$(command -v python3)
[ -x "$host_python" ] && pip_py=$host_python
pip_values() { # the values of pip's config key $1, one a line (file:// stripped off for indexes elsewhere)
    "$pip_py" -m pip config list 2> /dev/null | awk -F= -v k="$1" '{ split($1, a, "."); if (a[2] == k) { sub(/^[^=]*=/, ""); print } }' \
        | tr -d "'\"" | tr ' ' '\n' | sed '/^$/d' | sort -u
}
find_links=() indexes=() constraints=()
while read -r v; do find_links+=("$v"); done < <(pip_values find-links)
while read -r v; do indexes+=("$v"); done < <(pip_values index-url; pip_values extra-index-url)
while read -r v; do constraints+=("$v"); done < <(pip_values constraint)
file_indexes=()
for url in "${indexes[@]}"; do
    case $url in
    file://*) file_indexes+=("$url") ;;
    *) echo "  (pip index $url left out: no network in the clean room)" ;;
    esac
done
mounts=()
for dir in "${find_links[@]}"; do [ -d "$dir" ] && mounts+=("$dir"); done
for url in "${file_indexes[@]}"; do
    dir=${url#file://}
    # an index's pages link their files relative to it (../../files/...): its parent folder goes in
    [ "$(basename "$dir")" = simple ] && dir=$(dirname "$dir")
    [ -d "$dir" ] && mounts+=("$dir")
done
for dir in $(printf '%s\n' "${mounts[@]}" | sort -u); do echo "$dir|ro" >> "$bindlist"; done
{
    echo "[global]"
    if [ ${#file_indexes[@]} -gt 0 ]; then
        echo "index-url = ${file_indexes[0]}"
        [ ${#file_indexes[@]} -gt 1 ] && echo "extra-index-url = ${file_indexes[*]:1}"
    else
        echo "no-index = true"
    fi
    [ ${#find_links[@]} -gt 0 ] && echo "find-links = ${find_links[*]}"
    for c in "${constraints[@]}"; do
        [ -f "$c" ] && mkdir -p "$root$(dirname "$c")" && cp "$c" "$root$c" && echo "constraint = $c"
    done
    true
} > "$root/etc/pip.conf"
echo "pip in the clean room (/etc/pip.conf; read-only: $(cut -d'|' -f1 "$bindlist" | tr '\n' ' '))"
sed 's/^/  /' "$root/etc/pip.conf"

room() { # run a bash command line in the chroot, in a private mount namespace without a network
    unshare --mount --net --fork "$self" --__enter "$root" "$bindlist" "$1"
}

# -- install and check ------------------------------------------------------------------------------------------------
mkdir -p "$root/cleanroom"
cp "$wheel" "$root/cleanroom/"
venv=/cleanroom/venv
echo "installing $wheel_name[files] into a fresh venv ($venv) ..."
if ! room "python3 -m venv $venv && $venv/bin/pip install -q '/cleanroom/$wheel_name[files]'" > "$work/pip.log" 2>&1; then
    sed 's/^/  | /' "$work/pip.log" | tail -30
    echo "cleanroom.sh: FAIL: pip could not install $wheel_name[files] from the local wheels" >&2
    exit 1
fi
room "$venv/bin/pip list --format=freeze" | grep -iE '^(slipstream|numpy|pyarrow|simplejpeg|pillow)=' | sed 's/^/  /'

echo "checks, from / in the chroot:"
modules=(slipstream.images._roijpeg slipstream.sequences._packing slipstream.sequences._mixing)
for mod in "${modules[@]}"; do
    if out=$(room "cd / && $venv/bin/python -c 'import $mod as m, sys; print(m.__file__)'" 2>&1); then
        case $out in
        $venv/*) check OK "import $mod ($out)" ;;
        *) check FAIL "import $mod came from $out, not the venv" ;;
        esac
    else
        check FAIL "import $mod: $(echo "$out" | tail -1)"
        missing=$(room "cd / && for so in \$($venv/bin/python -c 'import importlib.util as u; s = u.find_spec(\"$mod\"); print(s.origin if s else \"\")'); do ldd \$so; done" 2>&1 | grep 'not found' | awk '{ print $1 }' | tr '\n' ' ' || true)
        if [ -n "$missing" ]; then
            echo "        $mod links shared libraries the clean room does not have: $missing"
            echo "        (a wheel for machines without libjpeg must carry libjpeg-turbo: link it statically, or auditwheel repair)"
        fi
    fi
done
if info=$(room "cd / && $venv/bin/slipstream info" 2>&1); then
    echo "$info" | sed 's/^/    | /'
    for row in "pixel kernels" "region JPEG decoder" "token kernels"; do
        value=$(echo "$info" | awk -v r="$row" 'index($0, r "  ") == 1 { sub("^" r " *", ""); print; exit }')
        case $value in
        active*) check OK "slipstream info: $row active" ;;
        "") check FAIL "slipstream info has no '$row' row" ;;
        *) check FAIL "slipstream info: $row: $value" ;;
        esac
    done
    bad=$(echo "$info" | grep -E 'not built|failed to import|disabled by' || true)
    [ -z "$bad" ] || check FAIL "slipstream info reports a compiled path off: $(echo "$bad" | head -1)"
else
    echo "$info" | sed 's/^/    | /'
    check FAIL "slipstream info did not run"
fi
libs=$(jpeg_files)
if [ -n "$libs" ]; then check FAIL "after the install, libjpeg in the chroot: $libs"; else check OK "after the install, still no libjpeg.so* or libturbojpeg.so* in the chroot"; fi
if [ "$fail" != 0 ]; then
    echo "cleanroom.sh: FAIL: $wheel_name does not give every fast path in a clean room" >&2
    exit 1
fi
echo "cleanroom.sh: PASS: $wheel_name gives every fast path in a clean room"
[ "$bench" = 1 ] || exit 0

# -- benchmark: host source build and clean room, interleaved ---------------------------------------------------------
host_version() { "$host_python" -c "import importlib.metadata as m; print(m.version('$1'))"; }
extra="torch==$(host_version torch | sed 's/+.*//') scikit-image==$(host_version scikit-image)"
echo "bench: adding $extra to the clean room's venv ..."
room "$venv/bin/pip install -q $extra" > "$work/pip-bench.log" 2>&1 || { tail -20 "$work/pip-bench.log" >&2; die "could not install $extra"; }
cp -r "$repo/benchmarks" "$root/cleanroom/benchmarks"
cache=$home/bench-images
mkdir -p "$cache"
echo "$cache|rw" >> "$bindlist"
host_src=$("$host_python" -c 'import slipstream; print(slipstream.__file__)')
echo "bench: benchmarks/bench_images.py $bench_args --cache $cache, $rounds rounds of host ($host_python: $host_src) then clean room"
for ((k = 1; k <= rounds; k++)); do
    (cd "$repo" && timeout 1200 "$host_python" benchmarks/bench_images.py $bench_args --cache "$cache") > "$work/host-$k.log" 2>&1 \
        || { tail -20 "$work/host-$k.log" >&2; die "the host's benchmark run $k failed"; }
    room "cd /cleanroom && timeout 1200 $venv/bin/python benchmarks/bench_images.py $bench_args --cache $cache" > "$work/room-$k.log" 2>&1 \
        || { tail -20 "$work/room-$k.log" >&2; die "the clean room's benchmark run $k failed"; }
    echo "  round $k done"
done
python3 - "$work" "$rounds" << 'EOF'
import re, statistics, sys
from pathlib import Path

work, rounds = Path(sys.argv[1]), int(sys.argv[2])
rows = {"3": r"\(3\) slipstream, jpeg", "4": r"\(4\) slipstream, smart", "3f": r"\(3f\) slipstream jpeg, ops\.Decode\(fast=True\)"}

def figures(log: Path) -> dict[str, float]:
    text = log.read_text()
    found = {}
    for key, pattern in rows.items():
        m = re.search(rf"^\s*{pattern}.*?\s{{2,}}([0-9]+)\s+\[", text, re.M)
        if m:
            found[key] = float(m.group(1))
    return found

def versions(log: Path) -> str:
    return next((line for line in log.read_text().splitlines() if line.startswith("slipstream ")), "?")

host = [figures(work / f"host-{k}.log") for k in range(1, rounds + 1)]
room = [figures(work / f"room-{k}.log") for k in range(1, rounds + 1)]
print(f"  host:       {versions(work / 'host-1.log')}")
print(f"  clean room: {versions(work / 'room-1.log')}")
print(f"  slipstream img/s (each run's median epoch), run by run:")
for key in rows:
    h = [f[key] for f in host if key in f]
    r = [f[key] for f in room if key in f]
    if not h or not r:
        print(f"  ({key}) not found in the benchmark's output")
        continue
    paired = [b / a for a, b in zip(h, r)]
    print(f"  ({key:<2}) host {' '.join(f'{x:.0f}' for x in h)} | clean room {' '.join(f'{x:.0f}' for x in r)} | "
          f"medians {statistics.median(h):.0f} vs {statistics.median(r):.0f}: ratio of medians "
          f"{statistics.median(r) / statistics.median(h):.3f} (median paired ratio {statistics.median(paired):.3f})")
EOF
