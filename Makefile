# Each target makes its own virtual environment and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch==2.13.0 is the CPU wheel these machines hold locally; any torch>=2.0 works.
TORCH ?= torch==2.13.0

.PHONY: demo test docs bench peers wheel wheels wheel-ft wheel-aarch64 clean

$(PY):
	@echo "== making a virtual environment in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# how slipstream goes into the venv: the source tree, editable (built in place with this machine's compiler), or with
# WHEEL=<file> a built wheel (CI's run: `make test WHEEL=dist/wheels/...whl` tests the installed wheel, not src/)
WHEEL ?=
slipstream = $(if $(WHEEL),'$(WHEEL)[$(1)]',-e '.[$(1)]')
export SLIPSTREAM_TEST_INSTALLED := $(if $(WHEEL),wheel,)

# which of the two the venv holds: switching (a wheel run after a source run, or back) installs slipstream again
MODE := $(VENV)/.mode-$(if $(WHEEL),wheel,src)
$(MODE): $(PY)
	rm -f $(VENV)/.mode-*
	touch $@

# what `make demo` needs: slipstream with its file formats, no test tools (pip shows what it fetches). A wheel of the
# version already installed is reinstalled by force (pip would keep the old files: a rebuilt wheel went untested)
$(VENV)/.files: $(PY) pyproject.toml $(WHEEL) $(MODE)
	@echo "== installing slipstream ($(if $(WHEEL),$(WHEEL),this checkout, editable)) with its file formats: pyarrow, Pillow, tqdm"
	@echo "   (a minute or two; from source, the compiled core is built where a C compiler and libjpeg's headers are found)"
	$(PY) -m pip install --progress-bar off $(call slipstream,files)
	$(if $(WHEEL),$(PY) -m pip install -q --force-reinstall --no-deps '$(WHEEL)')
	touch $@

$(VENV)/.test: $(VENV)/.files
	@echo "== installing the test tools: pytest, hypothesis, psutil, moto's S3 server, boto3, s3fs, webdataset"
	$(PY) -m pip install -q $(call slipstream,test)
	touch $@

$(VENV)/.torch: $(VENV)/.files
	@echo "== installing PyTorch ($(TORCH)) to compare against (a minute or two)"
	$(PY) -m pip install --progress-bar off '$(TORCH)'
	touch $@

# scikit-image's photos, for the benchmarks' smoke tests (tests/benchmarks/test_bench_gpu*.py,
# tests/benchmarks/test_bench_remote.py skip without it) and `make bench`; not in the test extra:
# it brings SciPy (~40 MB)
$(VENV)/.photos: $(VENV)/.files
	@echo "== installing scikit-image (the benchmarks' photos) for the benchmarks' smoke tests"
	$(PY) -m pip install -q 'scikit-image>=0.21'
	touch $@

# the JAX adapter's tests run on JAX's CPU backend
$(VENV)/.jax: $(VENV)/.test
	@echo "== installing JAX (CPU) for the JAX adapter's tests"
	$(PY) -m pip install -q 'jax>=0.4.30'
	touch $@

# ss.to_huggingface's tests (tests/convert/test_huggingface.py skips without it)
$(VENV)/.hf: $(VENV)/.test
	@echo "== installing Hugging Face datasets for the ss.to_huggingface tests"
	$(PY) -m pip install -q 'datasets>=2.14'
	touch $@

# ss.write(..., engine="ray")'s tests (tests/write/test_ray.py skips without it)
$(VENV)/.ray: $(VENV)/.test
	@echo "== installing Ray for the engine='ray' tests"
	$(PY) -m pip install -q 'ray>=2.9'
	touch $@

# the tested trainer recipes (tests/torch/test_torch_integrations.py skips what is missing)
$(VENV)/.trainers: $(VENV)/.torch
	@echo "== installing accelerate, PyTorch Lightning and transformers for the trainer recipes' tests"
	$(PY) -m pip install -q 'accelerate>=1.0' 'pytorch-lightning>=2.2' 'transformers>=4.46'
	touch $@

$(VENV)/.bench: $(VENV)/.test $(VENV)/.torch $(VENV)/.photos
	touch $@

# the documentation site's builder: MkDocs, the Material theme, mkdocstrings' Python handler. The build reads src/ as
# text (griffe), so it needs the docs extra's requirements only, not slipstream installed or its C extensions rebuilt
DOCS_REQUIREMENTS = $(shell sed -n 's/^docs = \[\(.*\)\]$$/\1/p' pyproject.toml | tr -d '",')
$(VENV)/.docs: $(PY) pyproject.toml
	@echo "== installing the documentation tools (the docs extra): $(DOCS_REQUIREMENTS)"
	@test -n "$(DOCS_REQUIREMENTS)" || { echo "no docs = [...] line in pyproject.toml" >&2; exit 1; }
	$(PY) -m pip install -q $(DOCS_REQUIREMENTS)
	touch $@

# the token benchmark's peers (grain, LitData, TRL, torchdata, MosaicML Streaming) in a virtual environment of their
# own, so the test environment stays as it is; slipstream is installed there too (editable), so both run in one process
PEERS ?= .venv-peers
$(PEERS)/.peers: pyproject.toml
	@echo "== making $(PEERS) with slipstream and the token benchmark's peers (a few minutes)"
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install -q --upgrade pip
	$(PEERS)/bin/python -m pip install --progress-bar off -e '.[files]' '$(TORCH)' psutil grain litdata trl datasets torchdata mosaicml-streaming
	# PyPI's torchvision (which litdata and mosaicml-streaming pull in) is built for CUDA torch and fails to load beside
	# the CPU wheel, breaking transformers' (so TRL's) imports; nothing here needs it (streaming cannot import without it)
	$(PEERS)/bin/python -m pip uninstall -y -q torchvision
	touch $@

peers: $(PEERS)/.peers

demo: $(VENV)/.torch
	@echo "== slipstream demo: making, packing and loading 1,000 photo-like JPEGs"
	$(PY) -m slipstream demo

test: $(VENV)/.test $(VENV)/.torch $(VENV)/.photos $(VENV)/.jax $(VENV)/.hf $(VENV)/.ray $(VENV)/.trainers
	$(PY) -m pytest -q --durations=20
	# the fallbacks on their own: NumPy pixel kernels and whole-image JPEG decoding (no _roijpeg)
	SLIPSTREAM_NO_ROIJPEG=1 $(PY) -m pytest -q tests/images/test_kernels.py tests/images/test_mapfields.py tests/images/test_imagetasks.py \
		tests/images/test_pixelops.py tests/images/test_pixel_tasks.py tests/images/test_batchops.py
	# ... and the token kernels' NumPy references (packing plans, row gathers, mixtures)
	SLIPSTREAM_NO_SEQCORE=1 $(PY) -m pytest -q tests/sequences/test_pack.py tests/sequences/test_pack_plan.py tests/sequences/test_pack_edges.py tests/sequences/test_pack_outputs.py tests/sequences/test_mix.py tests/sequences/test_mix_exact.py tests/sequences/test_mix_schedule.py

# binary wheels (tools/wheels/manylinux.sh: zig cc against glibc 2.17, libjpeg-turbo static inside _roijpeg; its tools
# and libjpeg-turbo are built once under ~/.cache/slipstream-wheels) into dist/wheels/: `wheel` for $(PYTHON)'s
# version only, `wheels` for CPython 3.10-3.13 and the sdist, each installed into a fresh venv and checked
PYTHON_VERSION = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
wheel:
	bash tools/wheels/manylinux.sh --python $(PYTHON_VERSION)

wheels:
	bash tools/wheels/manylinux.sh

# the aarch64 cp311 wheel (cross-built) and the compiled core's tests on it under qemu user emulation (about 8 minutes)
wheel-aarch64:
	bash tools/wheels/manylinux.sh --arch aarch64 --python 3.11
	bash tools/wheels/aarch64_check.sh dist/wheels/slipstream-*-cp311-cp311-manylinux2014_aarch64*.whl

# a cp313t wheel for the free-threaded CPython 3.13 (built from Debian's source once), and the threaded tests on it
wheel-ft:
	bash tools/wheels/freethreaded.sh --test

# the documentation site, into site/ (gitignored); --strict: any warning (a broken link, a docstring that does not
# render, a page missing from nav) fails the build
docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(VENV)/.bench
	$(PY) benchmarks/bench_loader.py
	$(PY) benchmarks/bench_packed.py
	$(PY) benchmarks/bench_images.py
	$(PY) benchmarks/bench_remote.py
	$(PY) benchmarks/bench_convert.py
	$(PY) benchmarks/bench_elastic.py
	$(MAKE) peers
	$(PEERS)/bin/python benchmarks/bench_tokens.py

clean:
	rm -rf $(VENV) $(PEERS)
