"""ReFrame 4 tests: a site's tuned MPI module against its untuned baseline, through `tunedmpi validate`.

    source /usr/share/lmod/lmod/init/bash          # ReFrame's modules system is Lmod (LMOD_CMD)
    reframe -C validate/reframe/config/local.py -c validate/reframe -r
    reframe -C validate/reframe/config/slurm.py -c validate/reframe -r \\
        -S site=oci-bm-optimized3.36 -S nodes=2 -S ppn=36

Nothing is measured or judged here a second time. The run step is validate/run.sh (`tunedmpi
validate`): the project's runner (fresh shell, `module purge; module load`, counterbalanced pairs,
timeouts, retries), its parsers and its statistics, one campaign per test run, written to a result
directory that ReFrame keeps in the test's output directory (`results/<site>-<time>/`: results.json,
report.md, junit.xml, logs/). This file only reads that results.json:

- sanity: the campaign produced data (else the message says why validate could not run);
- performance: one variable per benchmark x band, its gain (tuned vs baseline, > 1: tuned better,
  unit "x"); with `perflog_multiline` (both example configs) the perflog gets one record per
  benchmark x band;
- references: per system:partition, every band the campaign decided gets (1.0, the tolerance's
  loss edge) as its reference, so a gain below 1 / (1 + tolerance) fails by ReFrame's own rule
  (and shows in `reframe --performance-report`); a band too noisy to decide gets none;
- pass/fail: the module verdict of validate (PASS: a band wins, none loses). FAIL and NO-GAIN fail
  the test in its performance stage, after the gains are logged, naming the bands that lose;
  INCONCLUSIVE (too noisy to decide) skips it with that reason.

Variables (`-S name=value`): site, module, baseline, modulepath, full, benchmarks, repetitions,
extend, probes, nodes, ppn, run_timeout, tolerance, alpha, validate_sh, reanalyse. Details:
docs/reframe.md.
"""

import glob
import json
import os

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import run_after, run_before, sanity_function, variable
from reframe.core.exceptions import PerformanceError

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Band names as perflog-friendly variable names: no '<', '>' or '=' next to the value's '='.
BAND_NAMES = {"<=1KB": "le1KB", ">1MB": "gt1MB"}
NO_DATA = ("COULD-NOT-RUN", "NO-DATA")


def perf_name(benchmark, band):
    return "%s_%s" % (benchmark, BAND_NAMES.get(band, band))


def _value(gain):
    return gain


def loss_edge(tolerance):
    """validate's loss edge: a band loses only with a gain at or below 1 / (1 + tolerance)."""
    return 1 / (1 + tolerance)


@rfm.simple_test
class TunedMPIValidation(rfm.RunOnlyRegressionTest):
    descr = "tuned MPI module against its untuned baseline (tunedmpi validate)"
    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    sourcesdir = None
    tags = {"tunedmpi", "acceptance"}
    maintainers = ["tuned-mpi-modules"]
    time_limit = "2h"

    site = variable(str, value="")  # '' = validate's default: $TUNEDMPI_SITE, else local
    module = variable(str, value="")  # tuned module; '' = the site's
    baseline = variable(str, value="")  # untuned module to compare with; '' = the site's
    modulepath = variable(str, value="")  # extra module directory (module use)
    full = variable(bool, value=False)  # the studies' sizes instead of the quick set
    benchmarks = variable(str, value="")  # comma list, e.g. allreduce,alltoall; '' = all
    repetitions = variable(
        int, value=0
    )  # runs per module at the first look; 0 = validate's (5, 15 with full)
    extend = variable(bool, value=True)  # validate's one bounded extension for undecided bands
    probes = variable(bool, value=False)  # validate/probes even where IMB/OSU exist
    nodes = variable(int, value=1)
    ppn = variable(int, value=2)
    run_timeout = variable(int, value=0)  # seconds per benchmark run; 0 = validate's default
    # None: validate's, the policy's (src/tunedmpi/policy.py), so a site's policy holds here too
    tolerance = variable(float, type(None), value=None)  # smallest gain that counts
    alpha = variable(float, type(None), value=None)  # significance level
    validate_sh = variable(str, value=os.path.join(ROOT, "validate", "run.sh"))
    reanalyse = variable(str, value="")  # an earlier result directory: judged again, nothing run
    verdict = variable(str, value="")  # logged with every perflog record (loggable by default)
    results_dir = variable(str, value="")

    keep_files = ["results"]

    @run_before("run")
    def set_command(self):
        self.num_tasks = self.nodes * self.ppn  # the allocation validate measures in
        self.num_tasks_per_node = self.ppn
        self.executable = self.validate_sh
        opts = [
            "--nodes",
            str(self.nodes),
            "--ppn",
            str(self.ppn),
            "--out",
            os.path.join(self.stagedir, "results"),
        ]
        for option, value in (
            ("--site", self.site),
            ("--module", self.module),
            ("--baseline", self.baseline),
            ("--modulepath", self.modulepath),
        ):
            opts += [option, value] if value else []
        for option, value in (("--tolerance", self.tolerance), ("--alpha", self.alpha)):
            opts += [option, str(value)] if value is not None else []
        opts += ["--repetitions", str(self.repetitions)] if self.repetitions else []
        opts += ["--full"] if self.full else []
        opts += ["--benchmarks", self.benchmarks] if self.benchmarks else []
        opts += [] if self.extend else ["--no-extend"]
        opts += ["--probes"] if self.probes else []
        opts += ["--timeout", str(self.run_timeout)] if self.run_timeout else []
        opts += ["--reanalyse", self.reanalyse] if self.reanalyse else []
        self.executable_opts = opts

    def results(self, kept_in="outputdir"):
        """validate's results.json of this run (None when it wrote none). results_dir names where its
        directory is kept: the output directory, where ReFrame copies it when the test passes, or
        the stage directory, which ReFrame keeps when the test fails."""
        found = sorted(glob.glob(os.path.join(self.stagedir, "results", "*", "results.json")))
        if not found:
            return None
        with open(found[-1]) as fh:
            res = json.load(fh)
        where = os.path.relpath(os.path.dirname(found[-1]), self.stagedir)
        self.results_dir = os.path.join(getattr(self, kept_in), where)
        return res

    def _why_not(self):
        try:
            with open(os.path.join(self.stagedir, str(self.stderr))) as fh:
                lines = [line.strip() for line in fh if line.strip()]
        except OSError:
            lines = []
        said = [line for line in lines if line.startswith(("validate:", "error:"))] or lines[-3:]
        return "; ".join(said[-3:]) or "no output"

    @sanity_function
    def campaign_has_data(self):
        res = self.results("stagedir")
        if res is None or res["verdict"] in NO_DATA:
            why = "validate %s: %s" % (
                "wrote no results.json" if res is None else "could not run (%s)" % res["verdict"],
                self._why_not(),
            )
            return sn.assert_true(False, msg=why.replace("{", "{{").replace("}", "}}"))
        self.verdict = res["verdict"]
        return True

    @run_before("performance")
    def gains_as_performance_variables(self):
        res = self.results()
        bands = [b for b in res["bands"] if b["band"] != "reliability" and b["gain"] is not None]
        self.perf_variables = {
            perf_name(b["benchmark"], b["band"]): sn.make_performance_function(
                _value, "x", b["gain"]
            )
            for b in bands
        }
        # Reference 1.0 is parity with the baseline; the lower threshold puts ReFrame's bound at
        # validate's loss edge. An undecided band gets none: its noise is not a regression.
        edge = loss_edge(res["tolerance"])  # the tolerance validate judged with
        decided = [b for b in bands if not b.get("undecided")]
        self.reference = {
            self.current_partition.fullname: {
                perf_name(b["benchmark"], b["band"]): (1.0, edge - 1, None, "x") for b in decided
            }
        }
        if any(b["gain"] < edge for b in decided):  # ReFrame will fail it: its stage is kept
            self.results("stagedir")

    @run_after("performance")
    def module_verdict(self):
        res = self.results()
        if res["verdict"] == "INCONCLUSIVE":  # too noisy to say: not a regression, not a pass
            self.results("stagedir")
            self.skip(
                "tuned module %s: verdict INCONCLUSIVE (no band wins or loses, some undecided: "
                "too noisy; the pairs a decision needs are in the report); report: %s"
                % (res["modules"]["tuned"], os.path.join(self.results_dir, "report.md"))
            )
        if res["verdict"] != "PASS":  # FAIL (a band loses) and NO-GAIN (shown equal: no benefit)
            self.results("stagedir")
            lost = [
                "%s %s: %s" % (b["benchmark"], b["band"], b["reason"])
                for b in res["bands"]
                if b["verdict"] == "lose"
            ]
            raise PerformanceError(
                "tuned module %s: verdict %s (%s); report: %s"
                % (
                    res["modules"]["tuned"],
                    res["verdict"],
                    "; ".join(lost) if lost else "no band wins",
                    os.path.join(self.results_dir, "report.md"),
                )
            )
