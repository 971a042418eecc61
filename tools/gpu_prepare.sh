#!/usr/bin/env bash
# Prepare a GPU-machine check (issue 14) HERE, with network: what that machine (Python 3.12, torch with
# CUDA and torchvision, no network) lacks travels in .gpu/ (git-ignored):
#   .gpu/whl/   wheels of slipstream's dependencies missing there (simplejpeg, qoi)
#   .gpu/site/  slipstream's C extension built for CPython 3.12, and libjpeg.so.62 beside it
# Then run tools/gpu_checks.sh there, carrying .gpu (see that script's header).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
rm -rf .gpu && mkdir -p .gpu/whl .gpu/site/slipstream/images
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" -d .gpu/whl simplejpeg==1.9.0 qoi==0.8.0
py312=$(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3 | head -1)
build=$(mktemp -d)
"$py312" -m pip install -q setuptools >/dev/null
"$py312" setup.py -q build_ext --build-lib "$build" --build-temp "$build/tmp"
cp "$build"/slipstream/images/_roijpeg*.so .gpu/site/slipstream/images/
cp "$(ldconfig -p | awk '/libjpeg.so.62 .*x86-64/ {print $NF; exit}')" .gpu/site/
du -sh .gpu
