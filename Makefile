# One entry point for people and CI. `make` = the main job; `make test` = the test suite.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: all check tables render test clean

all: check render site-configs/local/spack.yaml

$(BIN)/tunedmpi: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,mpi,plots]'
	touch $@

check: $(BIN)/tunedmpi           ## validate every tuning table
	$(BIN)/tunedmpi check tuning-tables

render: $(BIN)/tunedmpi          ## write modulefiles/<site>/ for every site
	$(BIN)/tunedmpi render

# The local Spack environment names the checkout's .venv, which only make knows.
site-configs/local/spack.yaml: site-configs/local/spack.yaml.in
	sed 's|@VENV@|$(CURDIR)/$(VENV)|g' $< > $@.tmp && mv $@.tmp $@

tables: $(BIN)/tunedmpi          ## print the tables as nodes x ppn grids
	$(BIN)/tunedmpi tables

test: $(BIN)/tunedmpi            ## the whole test suite, and committed modulefiles are current
	$(BIN)/tunedmpi render --check
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info src/*.egg-info
