"""How a seed table's per-collective results become one job environment (issue: one configuration
per job geometry). The seed studies measured one collective at a time; a job runs them all. Rule
(site-configs/README.md, "Components"):
- the profile's row (site default_profile, TUNEDMPI_PROFILE overrides) gives the job-wide knobs:
  UCX transports and thresholds, placement, exactly as the table publishes them for that
  collective's chosen component;
- components are combined over every collective measured at the geometry, whatever the profile:
  UCC takes each collective that chose it for some message sizes (coll_ucc_cts) and declines the
  other sizes (UCC_CL_BASIC_TUNE); HCOLL, which has no per-size switch, is on when any collective's
  best (for most sizes) is HCOLL and switched off (HCOLL_ML_DISABLE_<COLL>=1) for the measured ones
  whose best is not.
The Lua twin is held to the same answers by tests/test_modules_conformance.py (every row)."""

import pytest

from tunedmpi.modules import envmap, explain, sites
from tunedmpi.tables.operations import UCC_ALGORITHMS

SEED_SITES = ("oci-bm-optimized3.36", "oci-bm-standard-e6.256")


def geometries(site):
    return sorted({(c.nodes, c.ppn) for c in site.table.cases})


def best_components(site, nodes, ppn):
    return {
        c.collective: envmap.dominant_component(c, site.components)
        for c in site.table.cases
        if (c.nodes, c.ppn) == (nodes, ppn) and c.collective in UCC_ALGORITHMS
    }


def env_for(site, nodes, ppn, profile=""):
    return explain.select(
        site, {"TUNEDMPI_NODES": str(nodes), "TUNEDMPI_PPN": str(ppn), "TUNEDMPI_PROFILE": profile}
    )["env"]


COMPONENT_VARS = (
    "OMPI_MCA_coll_ucc_enable",
    "OMPI_MCA_coll_ucc_priority",
    "OMPI_MCA_coll_ucc_cts",
    "OMPI_MCA_coll_hcoll_enable",
    "UCC_CL_BASIC_TUNE",
)


def ucc_bands(site, nodes, ppn):
    """{collective: [(lo, hi)]} of the sizes each collective at the geometry chose UCC for."""
    out = {}
    for c in site.table.cases:
        if (c.nodes, c.ppn) == (nodes, ppn) and c.collective in UCC_ALGORITHMS:
            bands = [(ch.band.lo, ch.band.hi) for ch in c.choice if ch.component == "ucc"]
            if bands:
                out[c.collective] = bands
    return out


def component_env(env):
    return {
        k: v for k, v in env.items() if k in COMPONENT_VARS or k.startswith("HCOLL_ML_DISABLE_")
    }


@pytest.mark.parametrize("name", SEED_SITES)
def test_components_are_combined_over_the_geometrys_collectives_for_every_profile(name):
    site = sites.load_named(name)
    profiles = sorted({c.collective for c in site.table.cases})
    for nodes, ppn in geometries(site):
        best = best_components(site, nodes, ppn)
        ucc = ucc_bands(site, nodes, ppn)
        hcoll = sorted(c for c, k in best.items() if k == "hcoll")
        expected = {}
        if ucc:
            expected.update(
                OMPI_MCA_coll_ucc_enable="1",
                OMPI_MCA_coll_ucc_priority="100",
                OMPI_MCA_coll_ucc_cts=",".join(sorted(ucc)),
            )
            declined = [
                "%s:%d-%s:0"
                % (
                    c,
                    max(lo * (nodes * ppn if c in ("alltoall", "allgather") else 1) - 1, 0),
                    "inf"
                    if hi is None
                    else hi * (nodes * ppn if c in ("alltoall", "allgather") else 1) - 1,
                )
                for c in sorted(ucc)
                for lo, hi in envmap.gaps(ucc[c])
            ]
            if declined:
                expected["UCC_CL_BASIC_TUNE"] = "#".join(declined)
        if best:
            expected["OMPI_MCA_coll_hcoll_enable"] = "1" if hcoll else "0"
        if hcoll:
            expected.update(
                ("HCOLL_ML_DISABLE_%s" % c.upper(), "1") for c in best if c not in hcoll
            )
        for profile in profiles:
            assert component_env(env_for(site, nodes, ppn, profile)) == expected, (
                name,
                nodes,
                ppn,
                profile,
            )


def test_a_geometry_where_three_collectives_chose_three_components():
    # BM.Optimized3.36, 2 nodes x 16 ppn (seed 000): allgather's best is HCOLL, allreduce's UCC,
    # alltoall's no component. HCOLL runs allgather only; UCC runs allreduce up to 8 KB (its choice:
    # UCC below 8 KB, HCOLL above; HCOLL has no per-size switch, so from 8 KB on allreduce goes back
    # to tuned: UCC declines from 8192 B, which UCC's inclusive range ends make "8191-inf");
    # alltoall stays on tuned.
    site = sites.load_named("oci-bm-optimized3.36")
    assert best_components(site, 2, 16) == {
        "allgather": "hcoll",
        "allreduce": "ucc",
        "alltoall": "none",
    }
    assert ucc_bands(site, 2, 16) == {"allreduce": [(0, 8192)]}
    assert component_env(env_for(site, 2, 16)) == {
        "OMPI_MCA_coll_hcoll_enable": "1",
        "HCOLL_ML_DISABLE_ALLREDUCE": "1",
        "HCOLL_ML_DISABLE_ALLTOALL": "1",
        "OMPI_MCA_coll_ucc_enable": "1",
        "OMPI_MCA_coll_ucc_priority": "100",
        "OMPI_MCA_coll_ucc_cts": "allreduce",
        "UCC_CL_BASIC_TUNE": "allreduce:8191-inf:0",
    }


@pytest.mark.parametrize("name", SEED_SITES)
def test_job_wide_knobs_are_the_profile_rows_published_values(name):
    # the profile's case, with its chosen component's settings, verbatim: the variables its knobs
    # map to are the module's, and another profile's row is used only when asked for
    site = sites.load_named(name)
    for nodes, ppn in geometries(site):
        best = best_components(site, nodes, ppn)
        for profile in sorted(
            {c.collective for c in site.table.cases if (c.nodes, c.ppn) == (nodes, ppn)}
        ):
            case = site.table.case(nodes, ppn, profile)
            comp = best.get(profile, "none")
            values = (
                case.settings.get(comp)
                or case.settings.get("none")
                or next(iter(case.settings.values()))
            )
            published, _ = envmap.knob_env(site, values, nodes >= 2)
            env = env_for(site, nodes, ppn, profile)
            assert {k: env.get(k) for k in published} == dict(published), (nodes, ppn, profile)
    # outside any TUNEDMPI_PROFILE the site's default profile gives them
    nodes, ppn = geometries(site)[-1]
    plain, named = env_for(site, nodes, ppn), env_for(site, nodes, ppn, site.default_profile)
    assert plain.pop("TUNEDMPI_SEEN") != named.pop("TUNEDMPI_SEEN")  # what the load read
    assert plain == named
