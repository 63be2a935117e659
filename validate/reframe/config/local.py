"""ReFrame configuration: this machine, the local site (local scheduler and launcher, Lmod).

    source /usr/share/lmod/lmod/init/bash
    reframe -C validate/reframe/config/local.py -c validate/reframe -r

The launcher stays `local` on every system: the test's single command is validate/run.sh, which
starts mpirun itself, once per benchmark run and module (a launcher would start it N times)."""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "tunedmpi_rfm_common", os.path.join(os.path.dirname(__file__), "common.py")
)
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)

site_configuration = common.configuration(
    {
        "name": "local",
        "descr": "this machine, site-configs/local (the Open MPI wheel in .venv)",
        "hostnames": [".*"],
        "partitions": [
            {
                "name": "default",
                "descr": "the local machine",
                "scheduler": "local",
                "launcher": "local",
                "environs": ["builtin"],
                "max_jobs": 1,  # one validation at a time: they measure the same cores
            }
        ],
    }
)
