# Each target makes its own virtual environment and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch==2.13.0 is the CPU wheel these machines hold locally; any torch>=2.0 works.
TORCH ?= torch==2.13.0

.PHONY: demo test bench clean

$(PY):
	@echo "== making a virtual environment in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.test: $(PY) pyproject.toml
	@echo "== installing slipstream with its file formats (pyarrow, simplejpeg, Pillow, numba...) and test tools"
	$(PY) -m pip install -q -e '.[test]'
	touch $@

$(VENV)/.torch: $(VENV)/.test
	@echo "== installing PyTorch ($(TORCH)) to compare against (a minute or two)"
	$(PY) -m pip install -q '$(TORCH)'
	touch $@

# the JAX adapter's tests run on JAX's CPU backend
$(VENV)/.jax: $(VENV)/.test
	@echo "== installing JAX (CPU) for the JAX adapter's tests"
	$(PY) -m pip install -q 'jax>=0.4.30'
	touch $@

# ss.to_huggingface's tests (tests/test_huggingface.py skips without it)
$(VENV)/.hf: $(VENV)/.test
	@echo "== installing Hugging Face datasets for the ss.to_huggingface tests"
	$(PY) -m pip install -q 'datasets>=2.14'
	touch $@

# ss.write(..., engine="ray")'s tests (tests/test_ray.py skips without it)
$(VENV)/.ray: $(VENV)/.test
	@echo "== installing Ray for the engine='ray' tests"
	$(PY) -m pip install -q 'ray>=2.9'
	touch $@

# the tested trainer recipes (tests/test_torch_integrations.py skips what is missing)
$(VENV)/.trainers: $(VENV)/.torch
	@echo "== installing accelerate, PyTorch Lightning and transformers for the trainer recipes' tests"
	$(PY) -m pip install -q 'accelerate>=1.0' 'pytorch-lightning>=2.2' 'transformers>=4.46'
	touch $@

$(VENV)/.bench: $(VENV)/.torch
	$(PY) -m pip install -q psutil scikit-image
	touch $@

demo: $(VENV)/.torch
	$(PY) -m slipstream demo

test: $(VENV)/.torch $(VENV)/.jax $(VENV)/.hf $(VENV)/.ray $(VENV)/.trainers
	$(PY) -m pytest -q
	# the fallbacks on their own: NumPy pixel kernels (no numba), whole-image JPEG decoding (no _roijpeg)
	SLIPSTREAM_NO_NUMBA=1 SLIPSTREAM_NO_ROIJPEG=1 $(PY) -m pytest -q tests/test_kernels.py tests/test_mapfields.py tests/test_tasks.py

bench: $(VENV)/.bench
	$(PY) benchmarks/bench_loader.py
	$(PY) benchmarks/bench_packed.py
	$(PY) benchmarks/bench_images.py
	$(PY) benchmarks/bench_remote.py
	$(PY) benchmarks/bench_convert.py
	$(PY) benchmarks/bench_elastic.py

clean:
	rm -rf $(VENV)
