"""What the example ReFrame configurations share (local.py, slurm.py): Lmod as the modules system
and perflogs with one record per performance variable (benchmark x band). The environment is
ReFrame's own `builtin`: validate builds nothing with it (the probes are built with the baseline
module's mpicc)."""

# One perflog record per benchmark x band (`perflog_multiline`): the test, where it ran, the test's
# result, validate's module verdict, the band's gain and the result directory behind it.
PERFLOG_FORMAT = (
    "%(check_job_completion_time)s|reframe %(version)s|%(check_name)s|"
    "%(check_system)s:%(check_partition)s|%(check_environ)s|result=%(check_result)s|"
    "verdict=%(check_verdict)s|%(check_perf_var)s=%(check_perf_value)s|"
    "unit=%(check_perf_unit)s|results=%(check_results_dir)s"
)


def configuration(system):
    """A whole ReFrame site configuration around one system (a dict of ReFrame's `systems` list)."""
    system = dict(system, modules_system="lmod")  # ReFrame drives Lmod through $LMOD_CMD
    return {
        "systems": [system],
        "logging": [
            {
                "perflog_multiline": True,
                "handlers": [
                    {"type": "stream", "name": "stdout", "level": "info", "format": "%(message)s"},
                    {
                        "type": "file",
                        "name": "reframe.log",
                        "level": "debug",
                        "format": "[%(asctime)s] %(levelname)s: %(check_info)s: %(message)s",
                        "append": False,
                    },
                ],
                "handlers_perflog": [
                    {
                        "type": "filelog",
                        "prefix": "%(check_system)s/%(check_partition)s",  # perflogs/<system>/<partition>/<test>.log
                        "level": "info",
                        "format": PERFLOG_FORMAT,
                        "datefmt": "%FT%T%:z",
                        "append": True,
                    }
                ],
            }
        ],
    }
