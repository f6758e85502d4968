# accelkit — two commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# any torch 2.11–2.15 works with accelkit. PyPI's Linux wheel is the CUDA build (several GB); for the CPU build
# give its index: TORCH_INDEX=https://download.pytorch.org/whl/cpu make demo
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=
TORCH_PIP_ARGS := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)
# test processes (pytest-xdist; each runs torch on one thread); TEST_WORKERS=0 runs the suite in this process
TEST_WORKERS ?= 2
# setuptools' editable build prints a boxed "Editable installation" warning (about folders named like the package
# in the working directory) on every `pip install -e`, even under -q: a note for package authors, not for someone
# running the demo. Only that message is silenced; pip's and the build's other warnings still show.
QUIET_EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

.PHONY: demo test check lint venv dev clean

$(VENV)/.base: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "accelkit needs Python 3.11+; run with PYTHON=python3.11 (or newer)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@if [ -z "$(TORCH_INDEX)" ] && [ "$$(uname -s)" = Linux ] && ! command -v nvidia-smi >/dev/null 2>&1; then \
	  echo "note: no NVIDIA GPU seen; pip may pull the CUDA build of $(TORCH) (several GB)." \
	       "For the CPU build: TORCH_INDEX=https://download.pytorch.org/whl/cpu make $(or $(MAKECMDGOALS),demo)"; fi
	$(BIN)/python -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH)"
	$(QUIET_EDITABLE) $(BIN)/python -m pip install -q -e .
	@touch $@

$(VENV)/.dev: $(VENV)/.base
	$(QUIET_EDITABLE) $(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

venv: $(VENV)/.base
dev: $(VENV)/.dev

## demo: set up, then run the main job on the built-in default
demo: $(VENV)/.base
	$(BIN)/accelkit hw detect
	$(BIN)/accelkit hw probe --quick
	$(BIN)/accelkit bench --suite quick
	$(BIN)/accelkit models show llama-3.1-70b
	$(BIN)/accelkit plan --model llama-3.1-70b --task train --compare h100,h200,mi300x,b200
	$(BIN)/accelkit results list
	$(BIN)/accelkit report --out report.html

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/mypy

# bytecode is written while the tests run (an environment may set PYTHONDONTWRITEBYTECODE=1): without it every test
# worker re-does pytest's assertion rewriting of each test module, and each of the ~200 processes the tests start
# compiles accelkit again — about 15 CPU-seconds per worker's collection and 0.2 s per process
WRITE_BYTECODE := PYTHONDONTWRITEBYTECODE=

## test: set up with the dev extras, then ruff, mypy and the whole test suite (the 25 slowest tests listed)
test: lint
	$(WRITE_BYTECODE) $(BIN)/python -m pytest -q -rs -n $(TEST_WORKERS) --dist loadscope --durations=25

## check: the edit-test loop: ruff, mypy and the unit tests (no model training, servers or browsers)
check: lint
	$(WRITE_BYTECODE) $(BIN)/python -m pytest -q -rs -n $(TEST_WORKERS) --dist loadscope tests/unit

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
