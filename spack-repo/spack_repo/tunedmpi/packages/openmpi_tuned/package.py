# tuned-mpi-modules: Spack package for the tuned Open MPI module of one site.
# See docs/spack.md (how it is used) and tests/test_spack.py (what is checked).
import json
import os

from spack.package import *

#: The checkout of tuned-mpi-modules this repository lives in:
#: <checkout>/spack-repo/spack_repo/tunedmpi/packages/openmpi_tuned/package.py
CHECKOUT = os.path.realpath(
    os.path.join(os.path.dirname(os.path.realpath(__file__)), *([os.pardir] * 5))
)

#: Sites whose table this package can install: one folder each in site-configs/ with a site.yaml
#: and a spack.yaml. A new site adds its name here and its block of directives below.
SITES = ("oci-bm-optimized3.36", "oci-bm-standard-e6.256", "nagoya-flow-type2", "local")

#: Run with the Python that renders: the site config as Spack builds it. The site.yaml names
#: where the site's own (non-Spack) MPI lives; here the MPI is Spack's, so the derived copy names
#: Spack's prefix, the UCX Spack built it with and Spack's module names. Everything else, table
#: included, is the site's. Prints what install() checks: the table reference and MPI version.
DERIVE_SITE = r"""
import json, sys, yaml
src, dst, prefix, ucx, tuned, baseline = sys.argv[1:7]
with open(src, encoding="utf-8") as fh:
    doc = yaml.safe_load(fh)
mpi = doc["mpi"]
doc["mpi"] = {"flavour": mpi["flavour"], "version": str(mpi["version"]), "prefix": prefix}
if ucx:
    doc["ucx_version"] = ucx
doc["modules"] = {"tuned": tuned, "baseline": baseline}
doc["notes"] = list(doc.get("notes") or []) + [
    "Installed by Spack: mpi.prefix, ucx_version and modules are the Spack build's, not the site's"
]
with open(dst, "w", encoding="utf-8") as fh:
    yaml.safe_dump(doc, fh, sort_keys=False, allow_unicode=True)
print(json.dumps({"table": doc.get("table"), "version": str(mpi["version"])}))
"""

#: Run with the Python that renders, after `tunedmpi render`: the text of Spack's module. Spack
#: writes it into its own module tree, away from the rendered module's rules files (the
#: __<version>.rules/ folder beside share/tunedmpi/modulefiles/<site>/<tuned>/<version>.lua),
#: so the copy names that folder absolutely (tunedmpi.modules.render.pin_rules_dir); a module without
#: rules files is copied byte for byte. Argument: the rendered module, the copy to write.
PIN_RULES = r"""
import sys
from tunedmpi.atomic import write_atomic
from tunedmpi.modules import render
module, copy = sys.argv[1:3]
with open(module, encoding="utf-8") as fh:
    write_atomic(copy, render.pin_rules_dir(fh.read(), module))
"""


class OpenmpiTuned(Package):
    """Open MPI with measured defaults: the tuning table of one site and the Lmod module that
    `tunedmpi render` writes from it (tuned-mpi-modules). The module picks the variables of the
    nearest measured row for the job's nodes and processes per node at load time."""

    # No download: the tables, site configs and renderer are the checkout that holds this
    # repository (CHECKOUT), so package recipe and tables always come from the same commit.
    has_code = False

    # The version is the version of the Open MPI it tunes: openmpi-tuned/5.0.6 <-> openmpi/5.0.6.
    version("5.0.8")
    version("5.0.6")
    version("4.1.2")

    variant(
        "site",
        default="none",
        values=("none",) + SITES,
        multi=False,
        description="Site whose tuning table and site config (site-configs/<site>/) to install",
    )
    conflicts("site=none", msg="choose the site: openmpi-tuned site=<a folder of site-configs/>")

    # The renderer (src/tunedmpi) runs at install time; pyproject.toml lists the same packages.
    depends_on("python@3.9:", type="build")
    depends_on("py-pyyaml@5.4:", type="build")
    depends_on("py-jinja2@3:", type="build")

    # The MPI it tunes: the module puts its bin/ on PATH, so it must stay installed.
    depends_on("openmpi@5.0.8", type="run", when="@5.0.8")
    depends_on("openmpi@5.0.6", type="run", when="@5.0.6")
    depends_on("openmpi@4.1.2", type="run", when="@4.1.2")

    # What each site's table assumes of that MPI (tests/test_spack.py checks these against the
    # site.yaml components and the variables the rendered module sets).
    with when("site=oci-bm-optimized3.36"):
        requires("@5.0.6")
        # components none/ucc/hcoll; between nodes the table sets UCX_TLS=self,sm,rc and
        # self,sm,ud, so the UCX it configures needs those transports. A direct dependency
        # (one UCX in a unified environment): Spack 1.1 found the same constraint written as
        # requires("^ucx +verbs +rc +ud") unsatisfiable.
        depends_on("openmpi fabrics=ucx,ucc,hcoll", type="run")
        depends_on("ucx +verbs +rc +ud", type="run")
    with when("site=oci-bm-standard-e6.256"):
        requires("@5.0.6")
        # components none/ucc/hcoll; UCX thresholds only (single node)
        depends_on("openmpi fabrics=ucx,ucc,hcoll", type="run")
    with when("site=nagoya-flow-type2"):
        requires("@4.1.2")
        # components none/hcoll; pml ucx + osc ucx; the site's MPI is CUDA-aware (openmpi_cuda)
        depends_on("openmpi fabrics=ucx,hcoll +cuda", type="run")
    with when("site=local"):
        requires("@5.0.8")
        # the measured table sets pml ucx and UCX thresholds/transports (shared memory only)
        depends_on("openmpi fabrics=ucx", type="run")

    # Spack's Lmod module for this package is the module the renderer wrote at install time
    # (byte for byte, but for the absolute folder of its rules files: PIN_RULES):
    # spack-repo/templates/tunedmpi/openmpi-tuned.lua prints lmod_context.
    lmod_template = "tunedmpi/openmpi-tuned.lua"

    sanity_check_is_dir = ["share/tunedmpi/modulefiles", "share/tunedmpi/site-configs"]
    sanity_check_is_file = ["share/tunedmpi/spack-module.lua"]

    @property
    def site(self):
        return self.spec.variants["site"].value

    @property
    def rendered_module(self):
        """The tuned module `tunedmpi render` installed: share/tunedmpi/modulefiles/<site>/..."""
        return join_path(
            self.prefix.share, "tunedmpi", "modulefiles", self.site, self.name,
            "%s.lua" % self.spec.version,
        )

    @property
    def spack_module(self):
        """The text of Spack's module, written at install time from rendered_module (PIN_RULES)."""
        return join_path(self.prefix.share, "tunedmpi", "spack-module.lua")

    @property
    def lmod_context(self):
        path = self.spack_module
        if not os.path.isfile(path):
            # Only reached when modules are written for a prefix without the file: fail loudly.
            text = 'LmodError("openmpi-tuned: %s is missing; reinstall openmpi-tuned")\n' % path
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        return {"tunedmpi_module": text}

    @staticmethod
    def project_root():
        for part in ("tuning-tables", "site-configs", join_path("src", "tunedmpi")):
            if not os.path.isdir(join_path(CHECKOUT, part)):
                raise InstallError(
                    "openmpi-tuned renders from the tuned-mpi-modules checkout that holds its "
                    "Spack repository, but %s has no %s/" % (CHECKOUT, part),
                    "use spack-repo/ from a full clone of tuned-mpi-modules",
                )
        return CHECKOUT

    def install(self, spec, prefix):
        root = self.project_root()
        site = self.site
        mpi = spec["openmpi"]
        python = spec["python"].command
        share = join_path(prefix.share, "tunedmpi")

        # A project root holding this site's config as built here and the table it names.
        work = join_path(self.stage.source_path, "tunedmpi-root")
        site_dir = join_path(work, "site-configs", site)
        mkdirp(site_dir)
        ucx = mpi.dependencies(name="ucx")
        out = python(
            "-c", DERIVE_SITE,
            join_path(root, "site-configs", site, "site.yaml"), join_path(site_dir, "site.yaml"),
            str(mpi.prefix), str(ucx[0].version.up_to(2)) if ucx else "", self.name, mpi.name,
            output=str,
        )
        facts = json.loads(out.strip().splitlines()[-1])
        if facts["version"] != str(mpi.version):
            raise InstallError(
                "site %s tunes Open MPI %s, but this build has %s" % (site, facts["version"], mpi.version),
                "install openmpi-tuned@%s site=%s" % (facts["version"], site),
            )

        env = {
            "TUNEDMPI_ROOT": work,
            "PYTHONPATH": os.pathsep.join(
                p for p in (join_path(root, "src"), os.environ.get("PYTHONPATH")) if p
            ),
        }
        if facts["table"]:
            table = join_path(work, "tuning-tables", facts["table"] + ".yaml")
            mkdirp(os.path.dirname(table))
            copy(join_path(root, "tuning-tables", facts["table"] + ".yaml"), table)
            python("-m", "tunedmpi", "check", table, extra_env=env)
            install_tree(join_path(work, "tuning-tables"), join_path(share, "tuning-tables"))

        # The project's renderer, as `make render` runs it: tuned and untuned modules.
        python(
            "-m", "tunedmpi", "render", "--site", site, "--out", join_path(share, "modulefiles"),
            extra_env=env,
        )
        install_tree(join_path(work, "site-configs"), join_path(share, "site-configs"))
        if not os.path.isfile(self.rendered_module):
            raise InstallError("tunedmpi render wrote no %s" % self.rendered_module)
        # Its rules files (if the table has bands) were written beside it; Spack's copy of the
        # module lives elsewhere and is pointed at them.
        python("-c", PIN_RULES, self.rendered_module, self.spack_module, extra_env=env)

        # Which checkout the tables came from (reinstall with --overwrite after changing them).
        source = {"checkout": root, "site": site, "table": facts["table"]}
        git = which("git")
        if git and os.path.exists(join_path(root, ".git")):
            source["commit"] = git("-C", root, "rev-parse", "HEAD", output=str, error=str,
                                   fail_on_error=False).strip()
            source["uncommitted"] = git(
                "-C", root, "status", "--porcelain", "--", "tuning-tables", "site-configs", "src",
                output=str, error=str, fail_on_error=False,
            ).splitlines()
        with open(join_path(share, "SOURCE.json"), "w", encoding="utf-8") as fh:
            json.dump(source, fh, indent=1, sort_keys=True)
            fh.write("\n")
