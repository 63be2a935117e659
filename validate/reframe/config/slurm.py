"""ReFrame configuration: a Slurm cluster (batch jobs through sbatch, Lmod).

    source /usr/share/lmod/lmod/init/bash           # or your site's Lmod init
    reframe -C validate/reframe/config/slurm.py -c validate/reframe -r \\
        -S site=oci-bm-optimized3.36 -S nodes=2 -S ppn=36

Adapt the partition: `access` takes the sbatch options your site needs (partition, account, QoS,
constraint). The test asks for nodes x ppn tasks (-S nodes=.. -S ppn=..), and validate measures
inside that allocation. The scheduler is `squeue`, which polls the job with squeue and works with
or without Slurm accounting; with accounting, `slurm` (sacct) also gives ReFrame the job's exit
code. The launcher stays `local`: validate/run.sh starts mpirun itself (srun would start it once
per task)."""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "tunedmpi_rfm_common", os.path.join(os.path.dirname(__file__), "common.py")
)
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)

site_configuration = common.configuration(
    {
        "name": "cluster",
        "descr": "a Slurm cluster",
        "hostnames": [".*"],
        "partitions": [
            {
                "name": "compute",
                "descr": "compute nodes through sbatch",
                "scheduler": "squeue",
                "launcher": "local",
                "access": [],  # e.g. ['--partition=compute', '--account=hpc', '--exclusive']
                "environs": ["builtin"],
                "max_jobs": 1,  # validations one after another: each owns its nodes while it measures
            }
        ],
    }
)
