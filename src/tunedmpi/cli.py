"""`tunedmpi <verb>`: the command line. Bad input exits 2 with file:line: key: problem (fix: ...)."""

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from tunedmpi import paths
from tunedmpi.argtypes import MAX_TIMEOUT_S, add_levels, add_wait, duration, number, whole
from tunedmpi.errors import InputError, InputErrors, boundary
from tunedmpi.files import read_text
from tunedmpi.policy import POLICY
from tunedmpi.tables import schema, tablefmt

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2


def cmd_check(args):
    from tunedmpi.modules import sites

    # By default tuning-tables/ and site-configs/. A file named site.yaml is a site config; in a
    # folder that holds one, the other YAML files (space.yaml, spack.yaml ...) are not tables.
    found = schema.find_tables(args.paths or [str(paths.tables_dir()), str(sites.site_dir())])
    configs = [f for f in found if os.path.basename(f) == sites.SITE_FILE]
    site_dirs = {os.path.dirname(f) for f in configs}
    tables = [f for f in found if os.path.dirname(f) not in site_dirs]
    if not tables and not configs:
        raise InputError(
            " ".join(args.paths) or str(paths.tables_dir()),
            None,
            None,
            "no tables or site configs found",
            "give a table file, a site.yaml, or a directory holding them",
        )
    errors, loaded = [], []
    for path in configs:
        try:
            loaded.append(sites.load_site(path))
        except (InputError, InputErrors) as exc:
            errors += exc.errors if isinstance(exc, InputErrors) else [exc]
    try:
        checked = schema.load_all(tables)
    except InputErrors as exc:
        errors, checked = errors + exc.errors, []
    if errors:
        raise InputErrors(errors)
    for t in checked:
        nset = sum(len(c.settings) for c in t.cases)
        print(f"ok  {t.path}: {t.platform} {t.name}, {len(t.cases)} cases, {nset} settings")
    for site in loaded:
        tables = "table %s" % site.table_ref
        if site.node_types:
            default = {site.default_node_type: ", default"}
            tables = "node types " + ", ".join(
                "%s (%s%s)" % (nt.name, nt.site.table_ref, default.get(nt.name, ""))
                for nt in site.node_types
            )
        print(f"ok  {site.path}: site {site.name}, {site.mpi_flavour} {site.mpi_version}, {tables}")


def cmd_tables(args):
    loaded = schema.load_all(schema.find_tables(args.paths or [str(paths.tables_dir())]))
    chosen = [t for t in loaded if t.platform == args.platform] if args.platform else loaded
    if not chosen and args.platform:
        raise InputError(
            "--platform",
            None,
            "platform",
            "no table for platform '%s'" % args.platform,
            "use one of: %s" % ", ".join(sorted({t.platform for t in loaded})),
        )
    if args.format == "csv":
        if len(chosen) != 1:
            raise InputError(
                "--platform",
                None,
                "platform",
                "CSV needs exactly one table, %d match" % len(chosen),
                "add --platform, one of: %s" % ", ".join(sorted({t.platform for t in chosen})),
            )
        sys.stdout.write(tablefmt.to_csv(chosen[0]))
    else:
        sys.stdout.write("\n".join(tablefmt.grid(t) for t in chosen))


def cmd_render(args):
    from tunedmpi.files import stray_temps
    from tunedmpi.modules import render, sites

    loaded = [sites.load_named(n) for n in ([args.site] if args.site else sites.site_names())]
    files = render.render_all(loaded)  # everything rendered before anything is written
    out = args.out or str(render.modulefiles_dir())
    # temporary files of a render that was killed (files.TEMP_NAME)
    strays = [t for site in loaded for t in stray_temps(os.path.join(out, site.name))]
    # Rules files of geometries (or tables) that lost their bands: nothing will point at them.
    gone = [rel for site in loaded for rel in render.stale_rules(out, site, files)]
    if args.check:
        stale = [
            rel
            for rel, text in files.items()
            if _read(out, rel) != text
            or (render.EXECUTABLE.search(rel) and not os.access(os.path.join(out, rel), os.X_OK))
        ]
        problems = [f"stale: {out}/{rel} (run: tunedmpi render)" for rel in stale]
        problems += [
            f"stale: {out}/{rel} is no longer rendered (run: tunedmpi render, which removes it)"
            for rel in gone
        ]
        problems += [
            "stray: %s is a temporary file of a render that was killed (run: tunedmpi "
            "render, which removes it)" % path
            for path in strays
        ]
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return EXIT_FAIL
        print("ok  %d modulefiles in %s match the tables and site configs" % (len(files), out))
        return EXIT_OK
    for line in render.write(loaded, files, out):
        print(line)


def _read(root, rel):
    try:
        return read_text("%s/%s" % (root, rel))
    except (OSError, UnicodeError):
        return None


def cmd_explain(args):
    from tunedmpi.modules import explain, sites

    given = dict(NODES=args.nodes, PPN=args.ppn, PROFILE=args.profile, NODE_TYPE=args.node_type)
    env = dict(os.environ, **{"TUNEDMPI_" + k: str(v) for k, v in given.items() if v})
    result = explain.select(explain.mpi(sites.load_named(args.site), args.module), env)
    sys.stdout.write(explain.describe(result))


def cmd_install_module(args):
    from tunedmpi.modules import install

    install.install(
        args.checkout or str(paths.project_root()),
        args.site,
        args.share,
        args.installer,
        formats=[f for f in args.formats.split(",") if f] if args.formats else None,
        **_given(args, "mpi_prefix base_module ucx_version modules mpi_version name pinned_copy"),
        mpi_level=args.mpi_level,
    )


def _given(args, names):
    """{name: its option's value} of these space-separated option names, passed on by name."""
    return {name: getattr(args, name) for name in names.split()}


def cmd_known_params(args):
    from tunedmpi.modules import knownparams

    report = knownparams.check(
        [args.site] if args.site else None, root=args.modulefiles, folder=args.lists
    )
    sys.stdout.write(knownparams.describe(report))
    return EXIT_OK if report.ok() else EXIT_FAIL


def cmd_import_params(args):
    from tunedmpi.modules import paramlists

    for where in args.prefix:
        for path in paramlists.import_install(where, args.out, args.build):
            print("wrote %s" % path)


def cmd_import_seed(args):
    from tunedmpi.importers import seed000

    return seed000.main([args.seed, args.out])


def cmd_validate(args):
    from tunedmpi.acceptance import rows, validate, validate_cli
    from tunedmpi.bench.runner import CannotRun

    try:
        with validate.signals_interrupt():
            if args.reanalyse and (args.rows or rows.is_rows_campaign(args.reanalyse)):
                return rows.reanalyse(args.reanalyse, args.out)
            if args.rows:
                return rows.run_rows(args)
            return validate_cli.one(args)
    except CannotRun as exc:
        print("validate: cannot run: %s" % exc, file=sys.stderr)
        return validate.EXIT_CANNOT
    except (validate.Interrupted, KeyboardInterrupt) as exc:  # exit 2: no verdict, not a FAIL
        print("validate: %s" % (str(exc) or "interrupted by SIGINT: no verdict"), file=sys.stderr)
        return validate.EXIT_CANNOT


def _store(args):
    return args.store or str(paths.project_root() / "results-store")


def cmd_sweep(args):
    from tunedmpi.bench import machine
    from tunedmpi.bench.runner import CannotRun
    from tunedmpi.modules import sites
    from tunedmpi.regenerate import space, sweep

    site = sites.load_named(args.site)
    sp = space.narrowed(
        space.load_space(args.space or str(sites.site_dir() / site.name / "space.yaml"), site),
        args.repetitions,
        args.stage,
    )
    if args.plan:
        from tunedmpi.regenerate import plan

        laid = plan.sweep_plan(site, sp, args.nodes, args.ppn, _store(args), name=args.campaign)
        print("\n".join(plan.describe(laid, site, args.nodes, args.ppn)))
        return EXIT_OK
    try:
        with machine.measuring(args.wait) if not args.slurm_array else contextlib.nullcontext():
            cdir, job = sweep.run_sweep(
                site,
                sp,
                args.nodes,
                args.ppn,
                _store(args),
                args.campaign,
                args.slurm_array,
                args.sbatch_args,
                args.timeout,
                args.retries,
                args.modulepath or (),
                confirm=args.confirm,
            )
    except CannotRun as exc:
        print("sweep: %s" % exc, file=sys.stderr)
        return EXIT_INPUT
    config = ", ".join("%s=%s" % kv for kv in sorted(job.items())) or "MPI defaults"
    print(f"campaign {cdir} complete; the job configuration: {config}")
    print("next: tunedmpi tune --site %s" % site.name)


def cmd_retune(args):
    from tunedmpi.bench.runner import CannotRun
    from tunedmpi.modules import sites
    from tunedmpi.regenerate import retune

    site = sites.load_named(args.site)
    try:
        return retune.retune(site, args, _store(args))
    except CannotRun as exc:
        print("retune: %s" % exc, file=sys.stderr)
        return EXIT_INPUT


def _rerender(name, root):
    """The site's modules written anew under root (promote, rollback)."""
    from tunedmpi.modules import render, sites

    loaded = sites.load_named(name)
    return render.write([loaded], render.render_all([loaded]), root)


def cmd_promote(args):
    from tunedmpi.modules import revisions, sites

    code, lines = revisions.promote(sites.load_named(args.site), _rerender, args.results)
    for line in lines:
        print(line, file=sys.stderr if code else sys.stdout)
    return code


def cmd_rollback(args):
    from tunedmpi.modules import revisions, sites

    for line in revisions.rollback(sites.load_named(args.site), _rerender):
        print(line)


def cmd_sweep_task(args):
    from tunedmpi.regenerate import sweep

    return sweep.run_task(args.campaign_dir, args.stage, args.rep)


def cmd_ingest(args):
    from tunedmpi.regenerate import ingest

    cdir, written = ingest.ingest(
        args.site,
        args.nodes,
        args.ppn,
        args.logs,
        _store(args),
        args.campaign,
        args.stage,
        args.config,
    )
    for log, path, status in written:
        print("%s -> %s (%s)" % (log, path, status))


def cmd_tune(args):
    from tunedmpi.regenerate import tune

    target, new, old, decisions = tune.tune(
        args.site, _store(args), args.out, args.campaign, row_checks=args.row_check or ()
    )
    tune.report(target, new, old, decisions)


def cmd_power(args):
    from tunedmpi.acceptance import power_report

    return power_report.run(
        args.dirs,
        final=args.max_repetitions,
        **_given(args, "gain repetitions draws seed alpha tolerance max_pairs"),
    )


def cmd_history(args):
    from tunedmpi.acceptance import history

    return history.run(
        args.dirs or ["validate-results"],
        plots=args.out,
        **_given(args, "site tolerance alpha html"),
    )


def cmd_regret(args):
    from tunedmpi.regenerate import regret

    dirs = [Path(d) for d in args.campaign]
    bad = [str(d) for d in dirs if not (d / "campaign.json").is_file()]
    if bad:
        print(
            "regret: not a results-store campaign (no campaign.json): %s; give results-store/<campaign> "
            "directories" % ", ".join(bad),
            file=sys.stderr,
        )
        return EXIT_INPUT
    if (args.results is None) == (args.table is None):
        print(
            "regret: give a validate result directory or --table TABLE (one of them)",
            file=sys.stderr,
        )
        return EXIT_INPUT
    if args.table:
        meta = json.loads(read_text(dirs[0] / "campaign.json"))
        nodes, ppn = args.nodes or meta["nodes"], args.ppn or meta["ppn"]
        rows = regret.table_regret(
            schema.load_table(args.table), dirs, nodes, ppn, args.draws, args.state
        )
        what, source = "table's choice", "%s at %dx%d" % (args.table, nodes, ppn)
    else:
        rows = regret.regret(args.results, dirs, args.draws, args.state)
        what, source = "module", args.results
    if not rows:
        print("regret: nothing of %s was measured in the campaign(s)" % source, file=sys.stderr)
        return EXIT_INPUT
    sys.stdout.write(regret.report(rows, what, args.draws))


class Parser(argparse.ArgumentParser):
    """A bad option is one line naming it and the fix, exit 2 (not the whole usage)."""

    def error(self, message):
        self.exit(EXIT_INPUT, "%s: error: %s (see %s --help)\n" % (self.prog, message, self.prog))


def _parser_tables(sub):
    """check, tables, render, explain: the tables and the modules rendered from them."""
    p = sub.add_parser(
        "check", help="validate tuning tables and site configs (exit 2 on any problem)"
    )
    p.add_argument(
        "paths",
        nargs="*",
        help="tables, site.yaml files or directories (default: tuning-tables/ and site-configs/)",
    )
    p = sub.add_parser("tables", help="print tuning tables as grids or CSV")
    p.add_argument("paths", nargs="*", help="table files or directories (default: tuning-tables/)")
    p.add_argument("--platform", help="only this platform's table")
    p.add_argument("--format", choices=("grid", "csv"), default="grid")
    p = sub.add_parser("render", help="write the Lmod modulefiles of every site (or one)")
    p.add_argument("--site", help="only this site (default: every site in site-configs/)")
    p.add_argument("--out", help="output directory (default: modulefiles/)")
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when the files differ from what would be written",
    )
    p = sub.add_parser("explain", help="what the tuned module would set, here or for a geometry")
    p.add_argument("--site", required=True)
    p.add_argument("--nodes", type=whole(1))
    p.add_argument("--ppn", type=whole(1))
    p.add_argument("--profile")
    p.add_argument("--node-type", help="a node type of the site's node_types (else by partition)")
    p.add_argument(
        "--module", help="the tuned module, e.g. hpcx-tuned (default: the site's own MPI's)"
    )


def _parser_validate(sub):
    p = sub.add_parser(
        "validate",
        allow_abbrev=False,
        help="acceptance test: tuned module vs untuned baseline (exit 0 pass, 1 fail, 2 could not run)",
        description="Rerun IMB collectives and OSU one-sided tests (or the probes) with the "
        "untuned baseline and the tuned module, alternating, and decide with statistics whether "
        "the tuned module wins. Details: validate/README.md.",
    )
    from tunedmpi.acceptance import validate_cli

    validate_cli.add_arguments(p)


def _add_space_options(p):
    """What sweep and retune measure with: the knob space, the store, Slurm arrays."""
    p.add_argument("--space", help="knob-space file (default: site-configs/<site>/space.yaml)")
    p.add_argument("--store", help="results store (default: results-store/ in the checkout)")
    p.add_argument("--slurm-array", action="store_true", help="run each stage as a Slurm job array")
    p.add_argument("--sbatch-args", help="extra sbatch options for --slurm-array")


def _parser_sweep(sub):
    """sweep and the task of its Slurm job arrays."""
    p = sub.add_parser(
        "sweep",
        allow_abbrev=False,
        help="measure a site's knob space in stages (resumable; local or Slurm job arrays)",
    )
    p.add_argument("--site", required=True)
    p.add_argument("--nodes", type=whole(1), default=1)
    p.add_argument("--ppn", type=whole(1), default=2)
    _add_space_options(p)
    p.add_argument(
        "--campaign", help="campaign name (default: <site>-<nodes>x<ppn>-<space digest>[-confirm])"
    )
    p.add_argument(
        "--confirm",
        action="store_true",
        help="a confirmation campaign: per-collective stages only; tune chooses nothing from it, it tests "
        "the bands picked on the other campaigns on these runs (docs/regenerate.md)",
    )
    p.add_argument(
        "--repetitions",
        type=whole(2),
        help="repetitions per configuration instead of the space's (a campaign of its own)",
    )
    p.add_argument(
        "--stage",
        action="append",
        help="measure this stage of the space only (repeatable; a campaign of its own), e.g. a "
        "separate run of one collective's algorithms for regret",
    )
    p.add_argument("--timeout", type=number(0, MAX_TIMEOUT_S), help="seconds per run")
    p.add_argument("--retries", type=whole(0), default=POLICY.retries)
    p.add_argument("--modulepath", action="append")
    p.add_argument(
        "--plan",
        action="store_true",
        help="print the stages, runs and estimated time; measure nothing",
    )
    add_wait(p)
    # One Slurm array task of a sweep stage, for sweep's job script only: no help= keeps it out of
    # `tunedmpi --help` (argparse prints help=SUPPRESS of a sub-command as "==SUPPRESS==").
    p = sub.add_parser("sweep-task")
    p.add_argument("campaign_dir")
    p.add_argument("stage")
    p.add_argument("rep", type=int)


def _parser_loop(sub):
    """retune, promote, rollback: the closed loop (docs/regenerate.md); ingest and tune."""
    p = sub.add_parser(
        "retune",
        allow_abbrev=False,
        help="sweep only what can change the bands a validate campaign lost, tune and render a candidate",
    )
    p.add_argument("--site", required=True)
    p.add_argument(
        "--from", dest="from_dir", metavar="DIR", help="the validate campaign (default: the newest)"
    )
    p.add_argument("--results", default="validate-results", help="where validate campaigns are")
    _add_space_options(p)
    p.add_argument("--repetitions", type=whole(2), help="repetitions per configuration")
    p.add_argument(
        "--benchmarks",
        help="retune these benchmarks' stages (comma list), whatever the campaign says",
    )
    p.add_argument(
        "--plan", action="store_true", help="print the plan and its estimate; measure nothing"
    )
    p.add_argument(
        "--budget",
        type=duration,
        metavar="TIME",
        help="refuse a plan estimated above TIME, e.g. 45m",
    )
    p.add_argument(
        "--no-validate", action="store_true", help="render the candidate, do not validate it"
    )
    add_wait(p)
    p = sub.add_parser("promote", help="make the site's candidate the default (no band may lose)")
    p.add_argument("--site", required=True)
    p.add_argument(
        "--results", metavar="DIR", help="the candidate's validate campaign (default: the newest)"
    )
    p = sub.add_parser(
        "rollback", help="restore the table and modules promote replaced, byte for byte"
    )
    p.add_argument("--site", required=True)
    p = sub.add_parser(
        "ingest", help="put existing IMB/OSU logs (one repetition each) into the results store"
    )
    p.add_argument("--site", required=True)
    p.add_argument("--nodes", type=whole(1), required=True)
    p.add_argument("--ppn", type=whole(1), required=True)
    p.add_argument(
        "--config", action="append", help="knob=value of these logs (repeat; none = the baseline)"
    )
    p.add_argument("--campaign")
    p.add_argument("--stage", default="ingested")
    p.add_argument("--store")
    p.add_argument("logs", nargs="+")
    p = sub.add_parser(
        "tune", help="choose per case from the results store and write the site's tuning table"
    )
    p.add_argument("--site", required=True)
    p.add_argument("--store")
    p.add_argument(
        "--campaign", action="append", help="only these campaigns (default: all of the site's)"
    )
    p.add_argument("--out", help="table path (default: tuning-tables/<site>/<mpi>-<version>.yaml)")
    p.add_argument(
        "--row-check",
        action="append",
        metavar="DIR",
        help="a validate campaign of a module of these tables: collectives that lost a band there "
        "get no component (UCC) routing",
    )


def _parser_power(sub):
    """power and history: the verdict's figures over many campaigns."""
    p = sub.add_parser(
        "power",
        allow_abbrev=False,
        help="false-call rate and power of the verdict, by resampling measured campaigns",
        description="A/A resampling of validate result directories and results-store campaigns: "
        "per benchmark the false win-or-lose rate, the power for a true gain, run-to-run noise and "
        "order effects. Method: validate/README.md.",
    )
    p.add_argument(
        "dirs",
        nargs="+",
        metavar="DIR",
        help="validate result directories, results-store campaigns, or directories holding them",
    )
    p.add_argument(
        "--gain", type=number(1), default=1.3, help="true band gain for the power (default 1.3)"
    )
    p.add_argument(
        "--repetitions",
        type=whole(2),
        help="runs per module at the first look, for every campaign (default: each validate "
        "campaign's own design, paired from %d pairs as validate judges it; else %d)"
        % (POLICY.paired_min, POLICY.first_look["quick"]),
    )
    p.add_argument(
        "--max-repetitions",
        type=whole(2),
        help="runs per module after the one extension (default %d x --repetitions; equal: no "
        "extension)" % POLICY.extension_factor,
    )
    p.add_argument(
        "--max-pairs",
        type=whole(2),
        metavar="N",
        help="simulate validate --max-pairs N (--budget's looks; a draw holds at most the "
        "campaign's pairs)",
    )
    p.add_argument(
        "--draws", type=whole(10), default=200, help="resampled campaigns per pool (default 200)"
    )
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    add_levels(p)
    from tunedmpi.acceptance.history import DRIFT_RULE

    p = sub.add_parser(
        "history",
        allow_abbrev=False,
        help="validation campaigns over time: gain and verdict per band, trend plots, drift (exit 1)",
        description="Read validate result directories, print per module, benchmark and band the gain "
        "and verdict over time, write a trend plot per benchmark, and flag drift. "
        + DRIFT_RULE
        + " Exit 0: no drift; 1: drift; 2: bad input. Details: validate/README.md.",
    )
    p.add_argument(
        "dirs",
        nargs="*",
        metavar="DIR",
        help="validate result directories or folders of them (default: validate-results/)",
    )
    p.add_argument("--site", help="only this site's campaigns")
    add_levels(p)
    p.add_argument(
        "--out",
        "--plots",
        help="directory for the PNG trend plots (default: beside --html, OUT/plots/; else none)",
    )
    p.add_argument(
        "--html",
        metavar="OUT",
        help="also write a static dashboard, OUT/index.html (open it from file://)",
    )


def _parser_regret(sub):
    p = sub.add_parser(
        "regret",
        help="a validated module, or a table's choice, against the per-size oracle of a "
        "separate sweep campaign",
    )
    p.add_argument(
        "results", nargs="?", help="a validate/run.sh --out directory (tuned against baseline)"
    )
    p.add_argument(
        "--table", help="instead: a tuning table, its choice measured inside the campaign itself"
    )
    p.add_argument("--nodes", type=int, help="with --table: the geometry (default: the campaign's)")
    p.add_argument("--ppn", type=int, help="with --table: the geometry (default: the campaign's)")
    p.add_argument(
        "--campaign",
        action="append",
        required=True,
        help="results-store/<campaign> directory of a separate run (repeatable)",
    )
    p.add_argument(
        "--draws",
        type=whole(0),
        default=400,
        help="bootstrap redraws behind each figure's 95%% interval (default 400; 0: no intervals)",
    )
    p.add_argument(
        "--state",
        choices=("fast", "slow", "changed"),
        help="only the runs that met this host state, in the result and the campaigns alike",
    )


def _parser_install_module(sub):
    """install-module and the known-params lists it is checked against; import-seed."""
    p = sub.add_parser(
        "install-module",
        allow_abbrev=False,
        help="install a site's modules into a Spack or EasyBuild prefix (what both installers run)",
    )
    p.add_argument("--site", required=True, help="a folder of the checkout's site-configs/")
    p.add_argument(
        "--share",
        required=True,
        help="<prefix>/share/tunedmpi: gets site-configs/, tuning-tables/, modulefiles/, SOURCE.json",
    )
    p.add_argument(
        "--installer",
        required=True,
        choices=sorted(("spack", "easybuild")),
        help="who installs: its name in the notes, and its fix in error messages",
    )
    p.add_argument(
        "--checkout",
        help="the tuned-mpi-modules checkout to install from (default: the project root)",
    )
    mpi = p.add_mutually_exclusive_group()
    mpi.add_argument(
        "--mpi-prefix", help="the MPI as the build installed it (default: the site's mpi)"
    )
    mpi.add_argument(
        "--base-module",
        help="the module that provides the MPI in the build (default: the site's mpi)",
    )
    p.add_argument(
        "--ucx-version", help="the UCX the build's MPI uses (default: the site's ucx_version)"
    )
    p.add_argument(
        "--modules",
        nargs=2,
        metavar=("TUNED", "BASELINE"),
        help="the build's module names (default: the site's)",
    )
    p.add_argument("--formats", help="lua, tcl or lua,tcl (default: the site's module_formats)")
    p.add_argument(
        "--mpi-version", help="the MPI version the build installs; must be the site's mpi.version"
    )
    p.add_argument(
        "--name", help="the tuned module the build installs; must be the site's (after --modules)"
    )
    p.add_argument(
        "--pinned-copy",
        help="also write the tuned Lua module here, its rules folder named absolutely "
        "(the installer's own module, in a tree away from <share>/modulefiles)",
    )
    p.add_argument(
        "--mpi-level",
        help="the MODULEPATH folder the build's MPI module adds in a hierarchical module tree "
        "(site.yaml hierarchy.mpi_level; default: the site's)",
    )
    p = sub.add_parser(
        "known-params",
        help="every variable the modules set (and envmap can set) is one its "
        "library knows: exit 0, or 1 naming variable, version and list (known-params/)",
    )
    p.add_argument("--site", help="only this site (default: every site in site-configs/)")
    p.add_argument("--modulefiles", help="the rendered modules to read (default: modulefiles/)")
    p.add_argument("--lists", help="the known-params folder (default: known-params/)")
    p = sub.add_parser(
        "import-params",
        help="write known-params/<library>-<version>.txt from an install's "
        "ompi_info (+ prte_info), ucx_info, ucc_info",
    )
    p.add_argument(
        "prefix",
        nargs="+",
        help="an install prefix or its bin/ (e.g. /opt/openmpi-5.0.6 /opt/ucx-1.18.1)",
    )
    p.add_argument("--out", help="folder to write (default: known-params/)")
    p.add_argument(
        "--build", help="how that install was made, for the lists' header (default: its path)"
    )
    p = sub.add_parser("import-seed", help="regenerate the seed-000 table from the study's text")
    p.add_argument("seed", help="e.g. ../shared/seeds/000_6452ddfe42026a33.txt")
    p.add_argument("out", help="e.g. tuning-tables/oci-bm-optimized3.36/openmpi-5.0.6.yaml")


def _parser_coverage(sub):
    from tunedmpi.regenerate import coverage  # its options live beside it

    p = sub.add_parser(
        "coverage",
        allow_abbrev=False,
        help="node-hours of the site's jobs (Slurm accounting) per table row and match kind, "
        "and which geometries to measure next",
    )
    coverage.add_arguments(p)
    p.set_defaults(func=coverage.main)


def build_parser():
    parser = Parser(prog="tunedmpi", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for add in (
        _parser_tables,
        _parser_validate,
        _parser_sweep,
        _parser_loop,
        _parser_power,
        _parser_regret,
        _parser_install_module,
        _parser_coverage,
    ):
        add(sub)
    for verb, p in sub.choices.items():  # each verb runs cmd_<verb>(args), unless it names its own
        p.set_defaults(func=p.get_default("func") or globals()["cmd_" + verb.replace("-", "_")])
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]  # the verb's own arguments
    # the one exception boundary (errors.boundary); a verb that returns nothing succeeded
    return boundary(lambda: args.func(args) or EXIT_OK)


if __name__ == "__main__":
    sys.exit(main())
