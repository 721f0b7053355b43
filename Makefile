# Two commands for a newcomer: `make demo` and `make test`. Both create .venv when missing;
# `make demo` installs the package alone, `make test` (and the rest) with its dev tools.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test check bench install clean mutate screenshots

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --upgrade --quiet pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The demo needs only the package and its own dependencies (no test, lint or bench tools):
# the first picture comes after one short install.
$(DEMO_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --upgrade --quiet pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/reach demo

# The suite under coverage (started before the reach pytest plugin imports reach; subprocesses
# measured too, see [tool.coverage] in pyproject.toml), then lines and branches of reach/,
# failing below COV_BRANCHES % of branches.
COV_BRANCHES ?= 95
test: $(STAMP)
	rm -f .coverage .coverage.*
	$(BIN)/python -m coverage run -m pytest -q
	$(BIN)/python -m coverage combine -q
	$(BIN)/python tools/covgate.py --branches $(COV_BRANCHES)

check: $(STAMP)
	$(BIN)/python -m ruff check reach dashboard tests bench tools
	$(BIN)/python -m mypy

bench: $(STAMP)
	$(BIN)/python bench/all.py    # every benchmark; the tables land in docs/benchmarks.md

mutate: $(STAMP)
	$(BIN)/python tools/mutate.py --jobs 2    # reach/core mutation score per module; gate 95 %

# The dashboard pictures in README.md and docs/screenshots, drawn on the built-in sample state
# (tests/dashboard/test_dash_cli.py fails when they are stale). A live coordinator's picture:
# `reach-dash --url ws://127.0.0.1:8765 --token T --screenshot out.svg`.
screenshots: $(STAMP)
	$(BIN)/python -m dashboard.screenshots docs/screenshots

clean:
	rm -rf $(VENV) .pytest_cache
