# Two commands for a newcomer: `make demo` and `make test`. Both create .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check bench install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --upgrade --quiet pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/reach demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

check: $(STAMP)
	$(BIN)/python -m ruff check reach dashboard tests bench
	$(BIN)/python -m mypy

bench: $(STAMP)
	$(BIN)/python bench/all.py    # every benchmark; the tables land in docs/benchmarks.md

clean:
	rm -rf $(VENV) .pytest_cache
