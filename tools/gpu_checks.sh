#!/usr/bin/env bash
# The GPU machine's checks for issue 14, as one command (about 8 minutes; prepare first with
# tools/gpu_prepare.sh here). With the device tool:
#   run(command="bash tools/gpu_checks.sh", carry=[".gpu"], timeout_s=560)
# It installs the carried wheels, puts slipstream (src/) and its C extension for 3.12 on the path,
# runs the CUDA-only tests (they skip without CUDA elsewhere), then benchmarks/bench_gpu.py, writing
# $OUT/tests.log, $OUT/gpu.log and $OUT/gpu.json.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl || exit 1
mkdir -p /tmp/overlay/slipstream/images
cp -r src/slipstream /tmp/overlay/ && cp .gpu/site/slipstream/images/_roijpeg*.so /tmp/overlay/slipstream/images/
export PYTHONPATH=/tmp/overlay:/tmp/site LD_LIBRARY_PATH=$PWD/.gpu/site:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/tests.log"
python3 - <<'PY' 2>&1 | tee -a "$OUT/tests.log"
import numpy, torch
import slipstream.images.pipeline as p
try:
    import torchvision
    vision = torchvision.__version__
except Exception as exc:  # the device stage then decodes JPEGs on the CPU
    vision = f"not usable ({exc})"
print("roijpeg", p._roi_status, "| numpy", numpy.__version__, "| torch", torch.__version__, "| cuda", torch.cuda.is_available(), "| torchvision", vision)
PY
timeout 150 python3 -m pytest -q -p no:cacheprovider -k "cuda or nvjpeg" tests/images/device/test_gpu_stage.py tests/images/device/test_gpu_decode.py \
    tests/images/device/test_gpu_device.py tests/images/device/test_gpu_mapped.py tests/torch/test_torch_dropin.py -rs 2>&1 | tee -a "$OUT/tests.log"
timeout 420 python3 benchmarks/bench_gpu.py --json "$OUT/gpu.json" --budget-s 330 2>&1 | tee "$OUT/gpu.log"
