# accelkit — two commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# torch is pinned to the CPU build for this project's machines; any 2.11–2.15 works with accelkit
TORCH  ?= torch==2.13.0

.PHONY: demo test lint venv dev clean

$(VENV)/.base: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "accelkit needs Python 3.11+; run with PYTHON=python3.11 (or newer)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e .
	@touch $@

$(VENV)/.dev: $(VENV)/.base
	$(BIN)/python -m pip install -q -e '.[dev]'
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

## test: set up with the dev extras, then ruff and the whole test suite
test: lint
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
