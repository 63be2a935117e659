# One entry point for people and CI. `make` = the main job; `make test` = the test suite.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: all check tables test clean

all: check tables

$(BIN)/tunedmpi: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

check: $(BIN)/tunedmpi           ## validate every tuning table
	$(BIN)/tunedmpi check tuning-tables

tables: $(BIN)/tunedmpi          ## print the tables as nodes x ppn grids
	$(BIN)/tunedmpi tables

test: $(BIN)/tunedmpi            ## the whole test suite
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info src/*.egg-info
