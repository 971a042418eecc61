#!/usr/bin/env bash
# Prepare a GPU-machine check HERE, with network: what that machine (Python 3.12 in a venv, /opt/torch/.venv, with
# torch for CUDA, torchvision, numpy, pyarrow, pillow, tqdm and pytest; no network) lacks travels in .gpu/whl/
# (git-ignored):
#   slipstream's cp312 manylinux wheel, built from this working tree by tools/wheels/manylinux.sh (its C extensions
#   and libjpeg-turbo inside it: nothing to compile or link there)
#   qoi's cp312 wheel (slipstream[qoi]: the QOI items that tests/images/device/test_gpu_decode.py decodes)
# Then run tools/gpu_checks.sh there, carrying .gpu (see that script's header).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
rm -rf .gpu && mkdir -p .gpu/whl
built=$(mktemp -d)
trap 'rm -rf "$built"' EXIT
bash tools/wheels/manylinux.sh --python 3.12 --out "$built" --no-test
cp "$built"/slipstream-*-cp312-cp312-*manylinux_2_17_x86_64.whl .gpu/whl/ # the wheel alone: not the sdist or the reports
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" -d .gpu/whl qoi==0.8.0
ls -l .gpu/whl && du -sh .gpu
