# tuned-mpi-modules: Spack package for the tuned Open MPI module of one site.
# See docs/spack.md (how it is used) and tests/test_spack.py (what is checked).
import os

from spack.package import *
from spack.util import spack_yaml  # Spack's own YAML reader (PyYAML is not importable here)

#: The checkout of tuned-mpi-modules this repository lives in:
#: <checkout>/spack-repo/spack_repo/tunedmpi/packages/openmpi_tuned/package.py
CHECKOUT = os.path.realpath(
    os.path.join(os.path.dirname(os.path.realpath(__file__)), *([os.pardir] * 5))
)

#: A site folder is a Spack site when it has both: its site config and its Spack environment
#: (local's spack.yaml is written by `make` from spack.yaml.in, which is what the checkout holds).
SITE_FILE = "site.yaml"
ENV_FILES = ("spack.yaml", "spack.yaml.in")


def read_sites(checkout):
    """{site: (MPI version, [run dependency specs])} from <checkout>/site-configs/: every folder
    with a site.yaml and a Spack environment; the version is site.yaml's mpi.version, the specs
    its spack.depends_on (what the site's table assumes of Spack's MPI; site-configs/README.md).
    A new site is data only: its folder, its table, and this package reads it."""
    found = {}
    top = os.path.join(checkout, "site-configs")
    for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
        folder = os.path.join(top, name)
        path = os.path.join(folder, SITE_FILE)
        if not os.path.isfile(path) or not any(
            os.path.isfile(os.path.join(folder, f)) for f in ENV_FILES
        ):
            continue
        with open(path, encoding="utf-8") as fh:
            doc = spack_yaml.load(fh)
        mpi = doc.get("mpi") if isinstance(doc, dict) else None
        if not isinstance(mpi, dict) or not mpi.get("version"):
            raise ValueError(
                "%s has no mpi.version, which openmpi-tuned needs for site=%s "
                "(fix: write the MPI version, site-configs/README.md; tunedmpi check shows the rest)"
                % (path, name)
            )
        specs = ((doc.get("spack") or {}).get("depends_on")) or []
        if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
            raise ValueError(
                "%s: spack.depends_on must be a list of Spack specs (fix: e.g. "
                'depends_on: ["openmpi fabrics=ucx"], site-configs/README.md)' % path
            )
        found[name] = (str(mpi["version"]), [" ".join(str(s).split()) for s in specs])
    return found


#: Sites whose table this package can install (site-configs/, read when Spack loads the package).
SITES = read_sites(CHECKOUT)


class OpenmpiTuned(Package):
    """Open MPI with measured defaults: the tuning table of one site and the Lmod module that
    `tunedmpi render` writes from it (tuned-mpi-modules). The module picks the variables of the
    nearest measured row for the job's nodes and processes per node at load time."""

    # No download: the tables, site configs and renderer are the checkout that holds this
    # repository (CHECKOUT), so package recipe and tables always come from the same commit.
    has_code = False

    variant(
        "site",
        default="none",
        values=("none",) + tuple(SITES),
        multi=False,
        description="Site whose tuning table and site config (site-configs/<site>/) to install",
    )
    conflicts("site=none", msg="choose the site: openmpi-tuned site=<a folder of site-configs/>")

    # The renderer (src/tunedmpi) runs at install time; pyproject.toml lists the same packages.
    depends_on("python@3.9:", type="build")
    depends_on("py-pyyaml@5.4:", type="build")
    depends_on("py-jinja2@3:", type="build")

    # The version is the version of the Open MPI it tunes: openmpi-tuned/5.0.6 <-> openmpi/5.0.6,
    # one per MPI version of the sites; openmpi-tuned@V depends on openmpi@V at run time (the
    # module puts its bin/ on PATH, so it must stay installed).
    _v = _site = _specs = _spec = None  # loop names, deleted below: not attributes of the package
    for _v in sorted({v for v, _ in SITES.values()}):
        version(_v)
        depends_on("openmpi@%s" % _v, type="run", when="@%s" % _v)

    # Each site: its MPI version, and what its table assumes of that MPI (site.yaml
    # spack.depends_on; tests/test_spack.py checks them against the table's variables).
    for _site, (_v, _specs) in SITES.items():
        requires("@%s" % _v, when="site=%s" % _site)
        for _spec in _specs:
            depends_on(_spec, type="run", when="site=%s" % _site)
    del _v, _site, _specs, _spec

    # Spack's Lmod module for this package is the module the renderer wrote at install time
    # (byte for byte, but for the absolute folder of its rules files: install-module --pinned-copy):
    # spack-repo/templates/tunedmpi/openmpi-tuned.lua prints lmod_context.
    lmod_template = "tunedmpi/openmpi-tuned.lua"

    sanity_check_is_dir = ["share/tunedmpi/modulefiles", "share/tunedmpi/site-configs"]
    sanity_check_is_file = ["share/tunedmpi/spack-module.lua", "share/tunedmpi/SOURCE.json"]

    @property
    def site(self):
        return self.spec.variants["site"].value

    @property
    def spack_module(self):
        """The text of Spack's module, written at install time from the rendered module."""
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

    def mpi_level(self):
        """In Spack's Lmod MPI hierarchy (the environment's modules: default: lmod: hierarchy:
        [mpi], Spack's default): the folder Open MPI's module unlocks,
        <root>/<arch>/openmpi/<version>-<hash>/<compiler level>, which the tuned module then
        unlocks too, so what was built with that MPI stays active across openmpi <->
        openmpi-tuned swaps (docs/spack.md, "Module layout"). A flat tree (hierarchy:: []): None."""
        import spack.config
        import spack.modules.lmod as lmod

        if "mpi" not in (spack.config.get("modules:default:lmod:hierarchy") or []):
            return None
        # Spack 0.21 to 1.1: a module function; later: a class method of the configuration.
        make = getattr(lmod, "make_layout", None) or lmod.LmodConfiguration.make_layout
        unlocked = make(self.spec["openmpi"], "default", False).unlocked_paths[None]
        return os.path.join(*unlocked[0])

    def install(self, spec, prefix):
        """The project's one install routine (src/tunedmpi/modules/install.py), run by the build's
        Python: the site config as Spack builds it (mpi.prefix = Spack's Open MPI, ucx_version =
        the UCX it was built with, Spack's module names), the table checked, the modules rendered
        into share/tunedmpi/modulefiles, Spack's module text, SOURCE.json."""
        root = self.project_root()
        mpi = spec["openmpi"]
        ucx = mpi.dependencies(name="ucx")
        python = spec["python"].command
        args = [
            "-m",
            "tunedmpi",
            "install-module",
            "--installer",
            "spack",
            "--checkout",
            root,
            "--site",
            self.site,
            "--share",
            join_path(prefix.share, "tunedmpi"),
            "--mpi-prefix",
            str(mpi.prefix),
            "--mpi-version",
            str(mpi.version),
            "--modules",
            self.name,
            mpi.name,
            "--pinned-copy",
            self.spack_module,
        ]
        if ucx:
            args += ["--ucx-version", str(ucx[0].version.up_to(2))]
        level = self.mpi_level()
        if level:
            args += ["--mpi-level", level]
        pythonpath = os.pathsep.join(
            p for p in (join_path(root, "src"), os.environ.get("PYTHONPATH")) if p
        )
        err = python(
            *args, extra_env={"PYTHONPATH": pythonpath}, fail_on_error=False, error=str.split
        )
        if python.returncode:
            errors = [
                line[len("error: ") :] for line in err.splitlines() if line.startswith("error: ")
            ]
            raise InstallError(
                "openmpi-tuned site=%s: %s"
                % (self.site, "; ".join(errors) or "tunedmpi install-module failed"),
                err.strip()[-2000:],
            )
