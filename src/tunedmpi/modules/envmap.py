"""From a table row to environment variables, per MPI flavour and UCX version.

Used at render time (the modulefile carries the result as data) and by `tunedmpi explain`, so the
module and its Python twin cannot disagree on values. Facts behind each rule: docs/design.md, "Knob facts".
"""

from collections import OrderedDict

from tunedmpi.tables.knobs import base_component
from tunedmpi.tables.operations import OPERATIONS, UCC_ALGORITHMS

# Sizes from 1 B to 4 MB (powers of two): the range a component choice is weighed over.
WEIGHED_SIZES = [0] + [1 << i for i in range(23)]

# A row sets only what its table measured: a knob the study left alone stays as the user, the base
# module or the MPI's default has it (a neutral "all"/"auto" would override e.g. an HPC-X UCX_TLS).
# Unload undoes exactly what load set because the module keeps the chosen row (TUNEDMPI_ROW).

# HCOLL's switch that leaves one collective to the next component while HCOLL takes the others
# (a variable of the HCOLL library, not of Open MPI: docs/hpcx-sharp.md, "HCOLL per collective").
HCOLL_DISABLE = "HCOLL_ML_DISABLE_%s"

PLACEMENT = {
    # mpirun (PRRTE): only these three variables work; block = by core, cyclic = over NUMA nodes.
    # Ranking takes slot/node/span/fill only: "core" makes PRRTE 3 exit 213 without a word.
    "block": {
        "PRTE_MCA_rmaps_default_mapping_policy": "core",
        "PRTE_MCA_rmaps_default_ranking_policy": "slot",
        "PRTE_MCA_hwloc_default_binding_policy": "core",
        "SLURM_DISTRIBUTION": "block:block",
    },
    "cyclic": {
        "PRTE_MCA_rmaps_default_mapping_policy": "numa",
        "PRTE_MCA_rmaps_default_ranking_policy": "span",
        "PRTE_MCA_hwloc_default_binding_policy": "core",
        "SLURM_DISTRIBUTION": "block:cyclic",
    },
}


def dominant_component(case, available):
    """The component the case's choice gives for most weighed sizes; ties and gaps -> none."""
    if not case.choice:
        return "none"
    votes = {}
    for size in WEIGHED_SIZES:
        for ch in case.choice:
            if ch.band.lo <= size and (ch.band.hi is None or size < ch.band.hi):
                votes[ch.component] = votes.get(ch.component, 0) + 1
    best = max(votes.values()) if votes else 0
    winners = [c for c, v in votes.items() if v == best]
    comp = winners[0] if len(winners) == 1 else "none"
    return comp if base_component(comp) in available else "none"


def gaps(bands):
    """The sizes [(lo, hi)] that sorted, non-overlapping bands leave out of [0, no end)."""
    out, at = [], 0
    for lo, hi in bands:
        if lo > at:
            out.append((at, lo))
        at = hi
        if hi is None:
            break
    if at is not None:
        out.append((at, None))
    return out


def rndv_value(value, ucx_version, multi_node):
    """UCX >= 1.17 takes the keyed form as is; older UCX takes one value: inter or intra."""
    if value is None or ":" not in value or ucx_version >= (1, 17):
        return value
    parts = dict(p.split(":", 1) if ":" in p else ("", p) for p in value.split(","))
    return parts.get("inter" if multi_node else "intra") or parts.get("") or "auto"


def open_mpi_4(site):
    """Open MPI 4 names what 5 renamed (known-params/openmpi-4.1.4.txt): btl sm was vader, smsc was
    vader's single_copy_mechanism, and its mpirun (ORTE) reads no PRTE_MCA_ variable."""
    return site.mpi_flavour == "openmpi" and int(str(site.mpi_version).split(".")[0]) < 5


# UCX transports that stay inside a node: a UCX_TLS made only of these is meaningful on one node.
SHARED_MEMORY_TLS = {"self", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem", "mm"}
# UCX's sockets, which every site's nodes have (network_transports is about RDMA: rc, ud, dc)
SOCKET_TLS = {"tcp"}


def knob_env(site, values, multi_node):
    """Variables for one set of knob values (a table row's, or a sweep configuration's)."""
    env = OrderedDict()
    notes = []
    tls = values.get("ucx_tls")
    names = set(tls.lstrip("^").split(",")) if tls else set()
    local_only = names <= SHARED_MEMORY_TLS
    # sockets join every site's nodes; RDMA transports only a site whose network has them
    sockets = names <= SHARED_MEMORY_TLS | SOCKET_TLS and not (tls or "").startswith("^")
    if tls and (local_only or (multi_node and (sockets or site.network_transports))):
        env["UCX_TLS"] = tls
    elif tls:
        why = "this site's network has no such transports" if multi_node else "single-node row"
        notes.append("UCX_TLS %s not set: %s" % (tls, why))
    if values.get("ucx_rndv_thresh"):
        env["UCX_RNDV_THRESH"] = rndv_value(values["ucx_rndv_thresh"], site.ucx_version, multi_node)
    if values.get("ucx_zcopy_thresh"):
        env["UCX_ZCOPY_THRESH"] = str(values["ucx_zcopy_thresh"])
    old = open_mpi_4(site)
    if values.get("mapping") and old:
        env["SLURM_DISTRIBUTION"] = PLACEMENT[values["mapping"]]["SLURM_DISTRIBUTION"]
        notes.append(
            "PRTE_MCA_ placement not set: Open MPI %s's mpirun (ORTE) does not read it "
            "(under srun SLURM_DISTRIBUTION places the ranks)" % site.mpi_version
        )
    elif values.get("mapping"):
        env.update(PLACEMENT[values["mapping"]])
    for knob, var in (("pml", "OMPI_MCA_pml"), ("osc", "OMPI_MCA_osc")):
        if values.get(knob) and values[knob] != "default":
            env[var] = values[knob]
    # btl sm / btl tcp limits, mpi_yield_when_idle: Open MPI's own MCA names
    for knob in sorted(values):
        if knob.startswith(("btl_", "mpi_")) and values[knob] not in (None, "default"):
            env["OMPI_MCA_" + (knob.replace("btl_sm_", "btl_vader_", 1) if old else knob)] = str(
                values[knob]
            )
    if values.get("smsc") not in (None, "default") and old:
        env["OMPI_MCA_btl_vader_single_copy_mechanism"] = values["smsc"]  # cma, xpmem, knem or none
    elif values.get("smsc") not in (None, "default"):
        # none: every single-copy component excluded (copy in/out through the shared segment)
        env["OMPI_MCA_smsc"] = (
            "^cma,xpmem,knem,accelerator" if values["smsc"] == "none" else values["smsc"]
        )
    if env.get("OMPI_MCA_pml") == "ucx" and not site.network_transports:
        # Without an InfiniBand/RoCE device pml ucx disqualifies itself (and the job aborts)
        # unless it may use any transport and device, e.g. shared memory on one node.
        env["OMPI_MCA_pml_ucx_tls"] = "any"
        env["OMPI_MCA_pml_ucx_devices"] = "any"
    # Forced coll_tuned algorithms: how a sweep measures each one. A table's per-size choice is its
    # `bands`, which render writes into a rules file (a forced algorithm would beat the file, so
    # tables/schema.py refuses a row that forces a collective with bands).
    for knob in sorted(values):
        if knob.startswith("coll_tuned_"):
            env["OMPI_MCA_coll_tuned_use_dynamic_rules"] = "1"
            env["OMPI_MCA_" + knob] = str(values[knob])
    # A sweep's component stage: UCC runs these collectives at every size, with UCC's default
    # algorithm or the one named (a table routes per size with its `choice`: row_env).
    comps = {c: values.get("coll_%s_component" % c) or "none" for c in UCC_ALGORITHMS}
    ucc = sorted(c for c, v in comps.items() if base_component(v) == "ucc")
    if ucc and "ucc" in site.components:
        env.update(ucc_env(ucc, algorithms=[(c, 0, None, comps[c]) for c in ucc]))
    elif ucc:
        notes.append(
            "UCC not set for %s: the site's MPI has no UCC (site.yaml components)" % ", ".join(ucc)
        )
    return env, notes


def ucc_token(coll, lo, hi, ranks, setting="0"):
    """UCC's tuning token for coll from lo to hi (exclusive; None: no end), table sizes: score 0
    (declined) or "@<algorithm>". UCC matches a size against the first range whose inclusive end
    reaches it (ucc_coll_score_map.c: start <= size <= end), and a range it splits starts where
    the one before ends, so a range that must catch size S starts at S - 1."""
    scale = ranks if OPERATIONS[coll].ucc_per_rank else 1
    start = max(lo * scale - 1, 0)
    return "%s:%d-%s:%s" % (coll, start, "inf" if hi is None else hi * scale - 1, setting)


def ucc_env(collectives, declined=(), ranks=1, algorithms=()):
    """UCC for these collectives (Open MPI's coll_ucc_cts) and, where it should run only some
    sizes, UCC's own tuning string declining the others: ``declined`` = [(collective, lo, hi)],
    hi exclusive (None: no end), for a job of ``ranks`` ranks. Score 0 disables UCC's basic CL for
    that collective and range (ucc_info -c: UCC_CL_BASIC_TUNE), so UCC answers "not supported"
    and Open MPI's coll_ucc hands the call to the component below it (coll_tuned).
    ``algorithms`` = [(collective, lo, hi, component)]: where a component names one of UCC's
    algorithms (ucc@<name>), TL/UCP's tuning string (UCC_TL_UCP_TUNE) selects it there."""
    env = OrderedDict()
    env["OMPI_MCA_coll_ucc_enable"] = "1"
    # UCC's priority (10) is below tuned (30) and han (35): without this it is never used.
    env["OMPI_MCA_coll_ucc_priority"] = "100"
    env["OMPI_MCA_coll_ucc_cts"] = ",".join(collectives)  # only these go to UCC
    if declined:
        env["UCC_CL_BASIC_TUNE"] = "#".join(ucc_token(c, lo, hi, ranks) for c, lo, hi in declined)
    chosen = [
        ucc_token(c, lo, hi, ranks, "@" + comp.split("@", 1)[1])
        for c, lo, hi, comp in algorithms
        if "@" in comp
    ]
    if chosen:
        env["UCC_TL_UCP_TUNE"] = "#".join(chosen)
    return env


# HPC-X (NVIDIA's bundle of Open MPI 4.1.x, UCX, UCC, HCOLL and SHARP): a tuned hpcx module sets
# only variables documented for what HPC-X ships, each with its source (docs/hpcx-sharp.md, "HPC-X
# as the tuned MPI"). Everything else a row would set is left out, with a note saying why.
HPCX_MANUAL = "NVIDIA HPC-X Software Toolkit manual, rev 2.20-2.23 (docs.nvidia.com/networking/display/hpcxv223)"
HPCX_VARIABLES = {
    "UCX_TLS": (
        HPCX_MANUAL + ", 'Unified Communication - X Framework Library' (UCX is HPC-X's default "
        "pml since 2.1) and NVIDIA SHARP's 'Using NVIDIA SHARP with Open MPI' (-x "
        "UCX_TLS=dc,shm,self)"
    ),
    "UCX_RNDV_THRESH": (
        "UCX's own parameter (ucx_info -f of the UCX HPC-X bundles, as the HPC-X UCX page "
        "directs); keyed intra:/inter: form only with UCX >= 1.17 (docs/design.md, Knob facts)"
    ),
    "UCX_ZCOPY_THRESH": "UCX's own parameter (ucx_info -f of the UCX HPC-X bundles)",
    "OMPI_MCA_pml": (
        "Open MPI 4.1 MCA parameter (ompi_info); HPC-X's manual: UCX is the default pml"
    ),
    "OMPI_MCA_osc": "Open MPI 4.1 MCA parameter (ompi_info --param osc all)",
    "OMPI_MCA_coll_hcoll_enable": HPCX_MANUAL + ", 'HCOLL' (-mca coll_hcoll_enable 0/1)",
    "OMPI_MCA_coll_ucc_enable": (
        HPCX_MANUAL + ", 'Unified Collective Communication (UCC)': not enabled by default; -mca "
        "coll_ucc_enable 1"
    ),
    "OMPI_MCA_coll_ucc_priority": (
        "Open MPI's ucc component (docs.open-mpi.org, 'The ucc Component': enable it with "
        "coll_ucc_enable 1 and coll_ucc_priority 100)"
    ),
    "OMPI_MCA_coll_ucc_cts": (
        "Open MPI's ucc component, coll_ucc_cts (ompi_info --param coll ucc --level 9; check it "
        "in HPC-X's Open MPI 4.1 before relying on it)"
    ),
    "UCC_CL_BASIC_TUNE": (
        "UCC's own parameter (ucc_info -c of UCC 1.3.0: known-params/ucc-1.3.0.txt), read by the "
        "UCC HPC-X bundles; it keeps UCC to the message sizes its table chose (confirm with "
        "HPC-X's ucc_info -c)"
    ),
    "SLURM_DISTRIBUTION": (
        "Slurm's srun(1) (input environment variable of --distribution): the launcher's, not the "
        "MPI's"
    ),
}
HPCX_LEFT_OUT = (
    (
        "PRTE_MCA_",
        "PRRTE placement is Open MPI 5's mpirun; HPC-X's Open MPI 4.1 mpirun (ORTE) does not read it",
    ),
    (
        "HCOLL_ML_DISABLE_",
        "HCOLL's per-collective switch is documented only by site guides, not by NVIDIA "
        "(docs/hpcx-sharp.md): with HPC-X, HCOLL takes every collective it runs once it is on",
    ),
)


def hpcx_env(env, notes):
    """Only HPC-X-documented variables of ``env`` (HPCX_VARIABLES), and notes on what was left out."""
    kept = OrderedDict((k, v) for k, v in env.items() if k in HPCX_VARIABLES)
    gone = [k for k in env if k not in kept]
    notes = list(notes)
    for prefix, why in HPCX_LEFT_OUT:
        names = [k for k in gone if k.startswith(prefix)]
        if names:
            notes.append("not set for HPC-X: %s (%s)" % (", ".join(names), why))
    rest = [k for k in gone if not k.startswith(tuple(p for p, _ in HPCX_LEFT_OUT))]
    if rest:
        notes.append(
            "not set for HPC-X: %s (no HPC-X documentation for it was checked)" % ", ".join(rest)
        )
    return kept, notes


def row_env(site, table, nodes, ppn, profile):
    """One row: (ordered variables, the profile's component, its best NPS, notes on knobs left out)."""
    comps = {}
    for case in table.cases:
        if (case.nodes, case.ppn) == (nodes, ppn) and case.collective in UCC_ALGORITHMS:
            comps[case.collective] = dominant_component(case, site.components)
    case = table.case(nodes, ppn, profile)
    comp = comps.get(profile, "none")
    values = (
        case.settings.get(comp) or case.settings.get("none") or next(iter(case.settings.values()))
    )
    env, notes = knob_env(site, values, nodes >= 2)
    # Collective components, only where the table measured collectives at this geometry, combined
    # over the geometry's collectives whatever the profile (the seed studies measured one collective
    # at a time; the profile's row gives only the job-wide knobs): UCC takes each collective that
    # chose it for some sizes (coll_ucc_cts) and declines the sizes it did not win (UCC's tuning
    # string, so those calls go on to the next component); HCOLL, which has no per-size switch, is
    # on when any collective chose it for most sizes, and HCOLL's own per-collective switch
    # (HCOLL_ML_DISABLE_<COLL>, HCOLL_DISABLE) keeps it off for the measured ones that did not.
    has = set(site.components)
    ucc_bands = {
        case.collective: [
            (ch.band.lo, ch.band.hi, ch.component)
            for ch in case.choice
            if base_component(ch.component) == "ucc"
        ]
        for case in table.cases
        if (case.nodes, case.ppn) == (nodes, ppn) and case.collective in UCC_ALGORITHMS
    }
    ucc_colls = sorted(c for c, bands in ucc_bands.items() if bands)
    declined = [(c, lo, hi) for c in ucc_colls for lo, hi in gaps([b[:2] for b in ucc_bands[c]])]
    algorithms = [(c,) + band for c in ucc_colls for band in ucc_bands[c]]
    hcoll_colls = sorted(c for c, k in comps.items() if k == "hcoll")
    if "hcoll" in has and comps:
        env["OMPI_MCA_coll_hcoll_enable"] = "1" if hcoll_colls else "0"
        if hcoll_colls:
            for coll in sorted(c for c in comps if c not in hcoll_colls):
                env[HCOLL_DISABLE % coll.upper()] = "1"
    if "ucc" in has and ucc_colls:
        env.update(ucc_env(ucc_colls, declined, nodes * ppn, algorithms))
    if site.mpi_flavour == "hpcx":
        env, notes = hpcx_env(env, notes)
    return env, comp, values.get("nps"), notes


# Where each variable a row sets comes from (explain and module help show it beside the value):
# the table's knob, or what it is derived from. Names ending in "_" are prefixes; first match wins.
ORIGIN = (
    ("UCX_TLS", "the table's ucx_tls"),
    ("UCX_RNDV_THRESH", "the table's ucx_rndv_thresh (intra:/inter: form with UCX >= 1.17)"),
    ("UCX_ZCOPY_THRESH", "the table's ucx_zcopy_thresh"),
    ("PRTE_MCA_", "the table's mapping (block: by core; cyclic: over NUMA nodes), for mpirun"),
    ("SLURM_DISTRIBUTION", "the table's mapping, for srun"),
    ("OMPI_MCA_pml_ucx_", "derived: pml ucx on a site without InfiniBand/RoCE disqualifies itself"),
    ("OMPI_MCA_pml", "the table's pml"),
    ("OMPI_MCA_osc", "the table's osc"),
    ("OMPI_MCA_smsc", "the table's smsc (single copy)"),
    ("OMPI_MCA_btl_vader_single_copy_mechanism", "the table's smsc (single copy, Open MPI 4)"),
    ("OMPI_MCA_coll_ucc_", "derived: UCC won some sizes of these collectives (the table's choice)"),
    ("UCC_CL_BASIC_TUNE", "derived: UCC declines the sizes it did not win (the table's choice)"),
    ("UCC_TL_UCP_TUNE", "derived: UCC's algorithm where one of them won (the table's choice)"),
    ("OMPI_MCA_coll_hcoll_enable", "derived: HCOLL won most sizes of a collective, or none"),
    ("HCOLL_ML_DISABLE_", "derived: HCOLL stays off for a collective that did not choose it"),
    ("OMPI_MCA_coll_tuned_", "derived: the row's coll_tuned algorithm bands (its rules file)"),
    ("OMPI_MCA_", "the table's Open MPI parameter of the same name"),
)


def origin(name):
    """What the variable ``name`` comes from (ORIGIN), or "" for a name it does not know."""
    for key, text in ORIGIN:
        if name == key or (key.endswith("_") and name.startswith(key)):
            return text
    return ""


def evidence(table, case, limit=3):
    """A row's evidence in one line: its case's section (campaign or study section) and at most
    ``limit`` measured gains (a tuned table's stages that chose, at this geometry) or findings."""
    head = "%dx%d stage " % (case.nodes, case.ppn)
    gains = [
        n[len(head) - len("stage ") :]
        for n in table.provenance.get("notes") or []
        if isinstance(n, str) and n.startswith(head) and ": chosen" in n
    ]
    found = [f.en or f.text for f in case.findings if f.en or f.text]
    where = case.section if case.section.startswith("campaign") else "study section " + case.section
    return "; ".join([where] + (gains or found)[:limit])
