#!/usr/bin/env bash
# The GPU machine's checks for issue 14, as one command (about 8 minutes; prepare first with
# tools/gpu_prepare.sh here). With the device tool:
#   run(command="bash tools/gpu_checks.sh", carry=[".gpu"], timeout_s=560)
# It installs slipstream from the carried cp312 wheel, as a user would ('slipstream[files,qoi]' with
# --no-index --find-links .gpu/whl), runs the CUDA-only tests (they skip without CUDA elsewhere) against that install, then
# the device stage's pixel ops (bench_device_pixelops.py) and benchmarks/bench_gpu.py, writing $OUT/tests.log,
# $OUT/pixelops.log, $OUT/gpu.log and $OUT/gpu.json.
#
# Where it installs: a venv of its own in /tmp/ss-venv whose site-packages come first, with the machine's
# python3's site-packages added behind them (a .pth that calls site.addsitedir, so their own .pth files
# run too). pip then resolves slipstream's dependencies against what the machine has (torch, torchvision,
# jax, numpy, pyarrow, pillow, tqdm), installs only what is carried, and fails when a dependency is
# neither there nor carried. Not `venv --system-site-packages`: that machine's python3 is itself a venv
# (/opt/torch/.venv), so it would expose the base interpreter's packages, not torch. Not `pip --user`:
# pip refuses it inside a venv. Not `pip --target`: pip ignores installed packages there, so a resolved
# install would shadow the machine's numpy, and --no-deps checks nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
venv=/tmp/ss-venv
rm -rf "$venv" && python3 -m venv --without-pip "$venv" || exit 1
python3 -c 'import sys; print("\n".join(f"import site; site.addsitedir({p!r})" for p in sys.path if p.endswith(("site-packages", "dist-packages"))))' \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/machine-site.pth" || exit 1
"$venv/bin/python" -m pip install -q --no-index --find-links .gpu/whl --no-compile --no-cache-dir 'slipstream[files,qoi]' || exit 1
export PATH=$venv/bin:$PATH PYTHONUNBUFFERED=1 # python3 below is the venv's
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/tests.log"
python3 - <<'PY' 2>&1 | tee -a "$OUT/tests.log"
import numpy, torch
import slipstream
import slipstream.images.pipeline as p
try:
    import torchvision
    vision = torchvision.__version__
except Exception as exc:  # the device stage then decodes JPEGs on the CPU
    vision = f"not usable ({exc})"
print("slipstream", slipstream.__version__, "from", slipstream.__file__)
print("roijpeg", p._roi_status, "| numpy", numpy.__version__, "| torch", torch.__version__, "| cuda", torch.cuda.is_available(), "| torchvision", vision)
PY
timeout 150 python3 -m pytest -q -p no:cacheprovider -k "cuda or nvjpeg" tests/images/device/test_gpu_stage.py tests/images/device/test_gpu_decode.py \
    tests/images/device/test_gpu_device.py tests/images/device/test_gpu_mapped.py tests/torch/test_torch_dropin.py \
    tests/images/device/test_device_pixelops.py tests/images/test_batchops.py -rs 2>&1 | tee -a "$OUT/tests.log"
timeout 60 python3 benchmarks/bench_device_pixelops.py --repeats 3 --torch-threads 8 2>&1 | tee "$OUT/pixelops.log"
timeout 390 python3 benchmarks/bench_gpu.py --json "$OUT/gpu.json" --budget-s 300 2>&1 | tee "$OUT/gpu.log"
