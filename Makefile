# goondan developer entry points. Everything runs inside .venv, created on demand.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: install dev demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python  ## install goondan (runtime dependencies only)
	$(PIP) install -e .

dev: $(BIN)/python  ## install goondan with the test/dev extras
	$(PIP) install -e '.[dev]'

demo: install  ## run the bundled quickstart example offline (scripted model)
	$(BIN)/goondan validate examples/quickstart
	$(BIN)/goondan repl --bundle examples/quickstart --state-root $(CURDIR)/.venv/demo-state --instance demo --input "What is 12 km in miles?"

test: dev  ## run the whole test suite
	$(BIN)/python -m pytest

lint: dev  ## ruff + mypy --strict
	$(BIN)/ruff check goondan tests scripts
	$(BIN)/mypy

bench: install  ## run every benchmark in scripts/ and print the figures
	@for s in scripts/bench_*.py; do echo "== $$s"; $(BIN)/python $$s || exit 1; done

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
