# goondan developer entry points. Everything runs inside .venv, created on demand.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
# No bytecode compiled at install time: the modules a run imports are compiled (once, cached in
# __pycache__) when first imported; compiling every file of Ray, Phoenix and their ~200
# dependencies took about half of each install (figures in the commit that added it).
INSTALL := install --no-compile
# Arize Phoenix, the real OTLP backend of tests/e2e/test_otlp_phoenix.py, in a venv of its own
# (it brings ~150 packages that must never reach the project's environment).
PHOENIX_VENV ?= .venv-phoenix
# More pytest arguments for `make test` (e.g. TEST_ARGS=tests/e2e/test_otlp_phoenix.py).
TEST_ARGS ?=

.PHONY: install dev demo test test-fast soak lint bench clean phoenix system-packages

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The editable install is redone only when pyproject.toml changes (the code itself is linked),
# so `make demo` and `make bench` start in seconds after the first time.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) $(INSTALL) -e .
	touch $@

install: $(VENV)/.installed  ## install goondan (runtime dependencies only)

dev: $(BIN)/python  ## install goondan with the test/dev extras
	$(PIP) $(INSTALL) -e '.[dev]'
	touch $(VENV)/.installed

demo: $(VENV)/.installed  ## run the bundled quickstart example offline (scripted model)
	$(BIN)/goondan validate examples/quickstart
	$(BIN)/goondan repl --bundle examples/quickstart --state-root $(abspath $(VENV))/demo-state -k demo --input "What is 12 km in miles?"

$(PHOENIX_VENV)/bin/phoenix:
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip --disable-pip-version-check -q $(INSTALL) \
	  'arize-phoenix>=12,<21'

phoenix: $(PHOENIX_VENV)/bin/phoenix  ## install Arize Phoenix (OTLP test backend) into its own venv

# The system packages the tests run for real (apt-get, one call, only for what is missing; a
# no-op when both are there):
# * postgresql — the server tests/support/postgres.py starts (a throwaway cluster per test
#   process; the tests never use the cluster the package may create). About a minute on a bare
#   machine.
# * chromium — the browser of the studio's tests (tests/studio/), driven by Playwright (dev
#   extras), which cannot download its own browser here. About 40 s.
# Not root and no sudo, or not Debian: a note; the PostgreSQL tests then fail (never skip), the
# browser tests skip themselves.
APT_GET ?= env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Use-Pty=0
PG_SERVER ?= /usr/lib/postgresql/*/bin/postgres
CHROMIUM ?= /usr/bin/chromium
system-packages:  ## install PostgreSQL and chromium for the tests (apt-get, only what is missing)
	@missing=""; \
	ls $(PG_SERVER) >/dev/null 2>&1 || missing="$$missing postgresql"; \
	[ -x $(CHROMIUM) ] || missing="$$missing chromium"; \
	[ -z "$$missing" ] && exit 0; \
	sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	if ! command -v apt-get >/dev/null; then \
	  echo "note: not Debian; install$$missing by hand (docs/storage.md, docs/studio.md)"; exit 0; fi; \
	$$sudo $(APT_GET) install --no-install-recommends $$missing \
	|| { $$sudo $(APT_GET) update && $$sudo $(APT_GET) install --no-install-recommends $$missing; }

# Two workers, one per core; a test file runs whole in one worker (its module fixtures and, for
# the Ray tests, the worker's session cluster are made once). Phoenix, which one test module
# needs (tests/e2e/test_otlp_phoenix.py), installs in the background while the tests run: the
# marker $(PHOENIX_PENDING) exists until that install ended, and the module's fixture waits for
# it (tests/support/phoenix_install.py); a failed install fails that test and `make test`.
PHOENIX_PENDING := $(abspath $(PHOENIX_VENV)).pending
test:  ## run the whole test suite (dev extras, Phoenix, PostgreSQL and chromium installed side by side)
	$(MAKE) --no-print-directory -j2 dev system-packages
	@rm -f $(PHOENIX_PENDING); \
	if [ ! -x $(PHOENIX_VENV)/bin/phoenix ]; then \
	  echo "installing Phoenix in the background (log: $(PHOENIX_VENV).log)"; \
	  touch $(PHOENIX_PENDING); \
	  { $(MAKE) --no-print-directory phoenix >$(PHOENIX_VENV).log 2>&1; rm -f $(PHOENIX_PENDING); } & \
	fi; \
	GOONDAN_PHOENIX_PENDING=$(PHOENIX_PENDING) $(BIN)/python -m pytest -n 2 --dist loadfile \
	  $(TEST_ARGS); code=$$?; \
	wait; \
	if [ ! -x $(PHOENIX_VENV)/bin/phoenix ]; then \
	  echo "Phoenix did not install:"; tail -n 20 $(PHOENIX_VENV).log; code=2; fi; \
	exit $$code

# The unit tests only: no process-spawning (e2e) or multi-second (slow) tests, no Phoenix.
test-fast: dev system-packages  ## run the unit tests (under 2 minutes on 2 cores)
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow and not e2e"

# The long failure trials (hundreds of kills, races) at their full counts; `make test` runs a few
# of each (tests/support/soak.py).
soak: dev system-packages  ## run the kill and race trials at their full counts
	GOONDAN_SOAK=1 $(BIN)/python -m pytest -n 2 --dist loadfile -m soak

lint: dev  ## ruff + mypy --strict
	$(BIN)/ruff check goondan tests scripts
	$(BIN)/mypy

bench: $(VENV)/.installed  ## run every benchmark in scripts/ and print the figures
	@for s in scripts/bench_*.py; do echo "== $$s"; $(BIN)/python $$s || exit 1; done

clean:
	rm -rf $(VENV) $(PHOENIX_VENV) $(PHOENIX_VENV).log $(PHOENIX_VENV).pending build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
