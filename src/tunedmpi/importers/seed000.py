"""Import seed 000 (OCI tutorial, Open MPI 5.0.6 collective tuning on BM.Optimized3.36) as a table.

The seed is a Japanese markdown document with one subsection ``### N-M-K. <Collective>`` per case:
chapter N = 1, 2, 4, 8 nodes; section M = 8, 16, 32, 36 processes per node; K = 1 Alltoall,
2 Allgather, 3 Allreduce. This module reads it and returns the tuning table described in
tuning-tables/README.md as a plain dict, and writes that dict as deterministic YAML::

    PYTHONPATH=src python -m tunedmpi.importers.seed000 SEED_FILE OUT_YAML

Nothing is guessed: a value, sentence or phrase that is not where the document's structure puts it
stops the import with a SeedError naming the section. Where the document disagrees with itself the
published N-M-0 summary table wins and the case gets a ``notes`` entry naming both values.
"""

import hashlib
import json
import re
import sys
from itertools import product

import yaml

from tunedmpi.files import read_bytes, write_atomic
from tunedmpi.tables import knobs
from tunedmpi.tables.units import format_human, format_size, parse_size

SOURCE = "shared/seeds/000_6452ddfe42026a33.txt"
PLATFORM = "oci-bm-optimized3.36"
NODES = {1: 1, 2: 2, 3: 4, 4: 8}  # chapter N -> node count
PPN = {1: 8, 2: 16, 3: 32, 4: 36}  # section M -> processes per node
COLLECTIVES = {1: "alltoall", 2: "allgather", 3: "allreduce"}
COMPONENT_COLUMNS = {"No COLL": "none", "UCC": "ucc", "HCOLL": "hcoll"}
COMPONENTS = ("none", "ucc", "hcoll")
MAPPINGS = {"ブロック分割": "block", "サイクリック分割": "cyclic"}
SETTING_ORDER = ("ucx_tls", "ucx_rndv_thresh", "ucx_zcopy_thresh", "nps", "mapping")
# The four findings bullets, in the order the study always writes them.
FINDING_ORDER = ("ucc_vs_none", "hcoll_vs_none", "ucc_vs_hcoll", "untuned_vs_tuned")
FINDINGS_MARK = "以上の結果は、以下のように考察することが出来ます。"
# The untuned configuration as each subsection states it (1 node omits UCX_ZCOPY_THRESH).
BASELINE_1NODE = ("UCX_RNDV_THRESH=auto", "coll_hcoll_enable=1", "coll_ucc_enable=0")
BASELINE_MULTI = (
    "UCX_RNDV_THRESH=auto",
    "UCX_ZCOPY_THRESH=auto",
    "coll_hcoll_enable=1",
    "coll_ucc_enable=0",
)


class SeedError(ValueError):
    """The seed does not have the structure or wording this importer knows; nothing is guessed."""


def at(section, problem):
    """A SeedError naming the section of the seed."""
    return SeedError("section %s: %s" % (section, problem))


# ---------------------------------------------------------------------------------------------
# Document structure
# ---------------------------------------------------------------------------------------------


def plain(text):
    """Drop markdown bold markers and collapse runs of blanks (Japanese text keeps no spaces)."""
    return re.sub(r"[ \t\u3000]+", " ", text.replace("**", "")).strip()


def front_matter_title(text):
    """The ``title:`` of the YAML front matter between the first two ``---`` lines."""
    m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    if not m:
        raise SeedError("the seed has no front matter (--- ... ---)")
    title = yaml.safe_load(m.group(1)).get("title")
    if not title:
        raise SeedError("the front matter has no title")
    return title


def split_headings(text):
    """Map every numbered heading ('0', '1', '1-1', '1-1-1', ...) to (title, body lines)."""
    sections, key = {}, None
    for line in text.splitlines():
        m = re.match(r"^(#{1,3}) +([0-9]+(?:-[0-9]+){0,2})\. +(.*)\Z", line)
        if m:
            key = m.group(2)
            if key in sections:
                raise SeedError("heading %s appears twice" % key)
            sections[key] = (m.group(3).strip(), [])
        elif re.match(r"^#{1,3} ", line) or line.strip() == "***":
            key = None  # an unnumbered heading or a rule ends it
        elif key is not None:
            sections[key][1].append(line)
    return sections


def table_after(lines, marker, section):
    """The first table after the line containing ``marker``, as {row label: {column: cell}}."""
    marked = [i for i, line in enumerate(lines) if marker in plain(line)]
    if len(marked) != 1:
        raise at(section, "expected one line with %r, found %d" % (marker, len(marked)))
    rows = []
    for line in lines[marked[0] + 1 :] + [""]:
        if line.lstrip().startswith("|"):
            row = line.strip()
            row = row[1:-1] if row.endswith("|") and len(row) > 1 else row[1:]
            cells = [plain(c) for c in row.split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):  # not the |:---:|-:| row
                rows.append(cells)
        elif rows:
            return {row[0]: dict(zip(rows[0][1:], row[1:])) for row in rows[1:]}
    raise at(section, "no table after %r" % marker)


def per_component(row, section, what):
    """A component table row {'No COLL': v, 'UCC': v, 'HCOLL': v} -> {'none': v, ...}."""
    if row is None or set(row) != set(COMPONENT_COLUMNS):
        raise at(
            section, f"the {what} row does not have the columns {', '.join(COMPONENT_COLUMNS)}"
        )
    return {COMPONENT_COLUMNS[col]: value for col, value in row.items()}


def knob(name, value, section):
    """The knob's normal form (tunedmpi.tables.knobs), or a SeedError naming the section."""
    try:
        return knobs.normalise(name, value)
    except knobs.KnobError as exc:
        raise at(section, "%s value %r: %s" % (name, value, exc.problem))


def one_match(pattern, lines, section, what):
    """The single match of ``pattern`` over the plain lines; anything else is a SeedError."""
    found = [m for m in (re.search(pattern, plain(line)) for line in lines) if m]
    if len(found) != 1:
        raise at(section, "expected one %s sentence, found %d" % (what, len(found)))
    return found[0]


# ---------------------------------------------------------------------------------------------
# Chapter 0: platform, command, message-size limits, method
# ---------------------------------------------------------------------------------------------


def read_overview(lines):
    """Provenance facts of chapter 0, each read from its own sentence, table or code block."""
    text = "\n".join(plain(line) for line in lines)

    def find(pattern, what):
        m = re.search(pattern, text, re.M)
        if not m:
            raise SeedError("chapter 0: cannot find the %s" % what)
        return m

    find(
        r"2ノード以上の全ての計測は、 クラスタ・ネットワーク の同一リーフスイッチ配下",
        "leaf-switch note",
    )
    runs = find(
        r"テストケース毎に(\d+)回実施し、その最大値と最小値を除く(\d+)回の算術平均をその結果とします",
        "measurement method",
    )
    if int(runs.group(1)) - 2 != int(runs.group(2)):
        raise SeedError("chapter 0: %s runs minus max and min is not %s" % runs.groups())
    msglog = {}
    limits = table_after(lines, "ここで計測するメッセージサイズの上限", "0")
    for coll in COLLECTIVES.values():
        row = limits.get(coll.capitalize())
        if row is None:
            raise SeedError("chapter 0: no message-size limit row for %s" % coll)
        msglog[coll] = {int(col.replace("ノード", "")): int(val) for col, val in row.items()}
        if sorted(msglog[coll]) != sorted(NODES.values()):
            raise SeedError("chapter 0: the %s limits do not cover 1, 2, 4 and 8 nodes" % coll)
    return {
        "shape": find(
            r"シェイプ： (\S+) （ Simultanious Multi Threading （以降 SMT と呼称します。）無効",
            "shape",
        ).group(1),
        "os": find(
            r"OS： Oracle Linux (\S+?)ベースのHPC \[?クラスタネットワーキングイメージ", "OS"
        ).group(1),
        "image": find(r"のイメージ No\.(\d+) です", "image number").group(1),
        "openmpi": find(r"^- OpenMPI ： (\S+?)（", "Open MPI version").group(1),
        "imb": find(r"^- Intel MPI Benchmarks ： (\S+?)（", "IMB version").group(1),
        "command": find(r"```sh\n\$ (numactl [^\n]+)\n```", "benchmark command").group(1),
        "runs": int(runs.group(1)),
        "kept": int(runs.group(2)),
        "msglog_max": msglog,
    }


# ---------------------------------------------------------------------------------------------
# Message-size phrases of the findings
# ---------------------------------------------------------------------------------------------

UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
SIZE = r"(\d+)(B|KB|MB|GB)"
# Who is compared with whom: the opening words of each bullet (bold markers already removed).
SUBJECTS = (
    (r"UCC は HCOLL に対して", "ucc_vs_hcoll", "UCC vs HCOLL: "),
    (r"UCC は", "ucc_vs_none", "UCC vs none: "),
    (r"HCOLL は", "hcoll_vs_none", "HCOLL vs none: "),
    (r"チューニング未適用は", "untuned_vs_tuned", "Untuned vs tuned: untuned "),
)
NO_CHANGE = "チューニング適用による性能の変化無し"
# One statement: where (optional), a modifier (optional), the effect, and the joint to the next.
EFFECT = re.compile(
    r"(?P<where>.*?)(?P<how>大幅に|概ね)?"
    r"(?P<effect>性能が大幅に低下|性能が向上|性能が低下|顕著な傾向が無|顕著な傾向無|有意な差無)"
    r"(?P<joint>し|く|、)?"
)
EFFECTS = {
    "性能が向上": ("better", "better"),
    "性能が低下": ("worse", "worse"),
    "性能が大幅に低下": ("worse", "much worse"),
    "顕著な傾向無": ("neutral", "no clear trend"),
    "顕著な傾向が無": ("neutral", "no clear trend"),
    "有意な差無": ("neutral", "no significant difference"),
}
MODIFIERS = {"概ね": "mostly ", "大幅に": "much "}
WHOLE = (0, None)


def parse_where(where, previous, section, phrase):
    """One 'where' expression -> (list of (lo, hi) bands, English). ``previous``: the bands of the
    statement before it (for それ未満 / それ以上 / それ以外). Sizes are powers of two and inclusive in
    the text; bands are [lo, hi) in bytes, hi None = no upper end."""
    where = where.strip()
    if where.endswith("で") and not where.endswith("まで"):  # "16KB以上で", but "16MBまで"
        where = where[:-1]
    if where in ("", "全域"):
        return [WHOLE], "over the whole range"
    if where == "ほぼ全域":
        return [WHOLE], "over almost the whole range"
    almost = where.endswith("のほぼ全域")  # それ未満のほぼ全域: the range, but not all of it
    if almost:
        where = where[: -len("のほぼ全域")]
    bands, words = [], []
    for part in re.split(r"と(?![0-9]+(?:B|KB|MB|GB)の間)", where):  # "2KBと8KBの間" is one range
        band, word = parse_range(part, previous, section, phrase)
        bands += band
        words.append(word)
    text = ("over almost all of the range " if almost else "") + " and ".join(words)
    return bands, text


def parse_range(part, previous, section, phrase):
    """One range word -> (bands, English). See parse_where."""
    m = re.fullmatch(SIZE + r"(以上|以下|未満)", part)
    if m:
        x = int(m.group(1)) * UNITS[m.group(2)]
        if m.group(3) == "以上":
            return [(x, None)], "at >= %s" % format_human(x)
        if m.group(3) == "以下":
            return [(0, 2 * x)], "at <= %s" % format_human(x)
        return [(0, x)], "below %s" % format_human(x)
    m = re.fullmatch(SIZE + r"(?:から|と)" + SIZE + r"(?:の間|まで)?", part)
    if m and (m.group(0).find("と") < 0 or part.endswith("の間")):
        lo, hi = (int(m.group(i)) * UNITS[m.group(i + 1)] for i in (1, 3))
        if hi < lo:
            raise at(section, "range %r runs backwards in %r" % (part, phrase))
        return [(lo, 2 * hi)], "from %s to %s" % (format_human(lo), format_human(hi))
    if part in ("それ未満", "それ以下", "それ以上", "それ以外"):
        if not previous:
            raise at(section, "%r has no preceding range in %r" % (part, phrase))
        if previous == [WHOLE]:
            raise at(section, "%r follows the whole range in %r" % (part, phrase))
        lo = min(b[0] for b in previous)
        hi = None if any(b[1] is None for b in previous) else max(b[1] for b in previous)
        if part in ("それ未満", "それ以下"):
            if lo == 0:
                raise at(section, "nothing lies below the range before %r in %r" % (part, phrase))
            return [(0, lo)], "below that"
        if part == "それ以上":
            if hi is None:
                raise at(section, "nothing lies above the range before %r in %r" % (part, phrase))
            return [(hi, None)], "above that"
        return complement(previous), "elsewhere"
    raise at(section, "cannot read the message-size expression %r in finding %r" % (part, phrase))


def complement(bands):
    """The parts of [0, inf) not covered by ``bands``."""
    out, edge = [], 0
    for lo, hi in sorted(bands, key=lambda b: b[0]):
        if lo > edge:
            out.append((edge, lo))
        if hi is None:
            return out
        edge = max(edge, hi)
    out.append((edge, None))
    return out


def parse_finding(phrase, section):
    """One findings bullet (bold markers removed) -> {text, about, en, bands}.

    Raises SeedError naming the section and the phrase when any part cannot be read."""
    for pattern, about, label in SUBJECTS:
        m = re.match(pattern, phrase)
        if m:
            break
    else:
        if phrase == NO_CHANGE:
            return {
                "text": phrase,
                "about": "untuned_vs_tuned",
                "en": "Untuned vs tuned: no change from tuning",
                "bands": [band_dict(WHOLE, "neutral")],
            }
        raise at(section, "finding %r names no known comparison" % phrase)
    rest = phrase[m.end() :].strip()
    bands, words, previous = [], [], None
    while rest:
        s = EFFECT.match(rest)
        if not s or (s.group("joint") is None and s.end() != len(rest)):
            raise at(section, "cannot read %r in finding %r" % (rest, phrase))
        effect, effect_en = EFFECTS[s.group("effect")]
        if s.group("joint") in ("く", "し") and effect != "neutral" and s.end() == len(rest):
            raise at(section, "finding %r ends in the middle of a sentence" % phrase)
        if s.group("joint") == "く" and effect != "neutral":
            raise at(section, "unexpected く after %r in %r" % (s.group("effect"), phrase))
        where, how = s.group("where"), MODIFIERS.get(s.group("how") or "", "")
        if where.startswith("概ね"):  # "概ね全域で": mostly, over the whole range
            where, how = where[len("概ね") :], MODIFIERS["概ね"] + how
        ranges, where_en = parse_where(where, previous, section, phrase)
        bands += [band_dict(r, effect) for r in ranges]
        words.append("%s%s %s" % (how, effect_en, where_en))
        previous = ranges
        rest = rest[s.end() :]
    # two bands of one finding must not overlap: the study never says two things of one size
    edges = sorted(band_bytes(b) for b in bands)
    if any(hi is None or hi > lo for (_, hi), (lo, _) in zip(edges, edges[1:])):
        raise at(section, "bands overlap in finding %r" % phrase)
    return {"text": phrase, "about": about, "en": label + "; ".join(words), "bands": bands}


def band_dict(band, effect):
    return {"from": size_value(band[0]), "to": size_value(band[1]), "effect": effect}


def size_value(n):
    """Bytes as the table writes them: 0, 512, '32kb', None (no upper end)."""
    if n is None:
        return None
    text = format_size(n)
    return int(text) if text.isdigit() else text


def band_bytes(band):
    return parse_size(band["from"]), (None if band["to"] is None else parse_size(band["to"]))


def read_findings(lines, section):
    """The four bullets after FINDINGS_MARK, parsed and checked to be in FINDING_ORDER."""
    marked = [i for i, line in enumerate(lines) if FINDINGS_MARK in line]
    if len(marked) != 1:
        raise at(section, "expected one %r line, found %d" % (FINDINGS_MARK, len(marked)))
    bullets = []
    for line in lines[marked[0] + 1 :]:
        if line.startswith("- "):
            bullets.append(plain(line[2:]))
        elif line.strip() and bullets:
            break
    if len(bullets) != 4:
        raise at(section, "expected 4 findings bullets, found %d" % len(bullets))
    findings = [parse_finding(b, section) for b in bullets]
    got = tuple(f["about"] for f in findings)
    if got != FINDING_ORDER:
        raise at(section, "findings compare %s, expected %s" % (got, FINDING_ORDER))
    return findings


# ---------------------------------------------------------------------------------------------
# Component choice (tuning-tables/README.md, "How a component choice is derived")
# ---------------------------------------------------------------------------------------------

SCORE = {"better": 1, "worse": -1, "neutral": 0, None: 0}


def effect_at(finding, size):
    """The finding's effect at ``size`` bytes, or None where it says nothing."""
    for band in finding["bands"]:
        lo, hi = band_bytes(band)
        if lo <= size and (hi is None or size < hi):
            return band["effect"]
    return None


def spans(findings):
    """[lo, hi) between every band edge of the findings, from 0 on (hi None: no upper end)."""
    edges = {0}
    for f in findings:
        for band in f["bands"]:
            edges.update(x for x in band_bytes(band) if x is not None)
    edges = sorted(edges)
    return zip(edges, edges[1:] + [None])


def derive_choice(findings):
    """Per message-size band, the component the findings 0-2 favour -> (choice rows, notes).

    none scores 0; ucc and hcoll +1/-1/0 from their finding against none; the highest wins; a
    tie with none keeps none; a ucc/hcoll tie above none goes to the one ucc_vs_hcoll favours, or
    to hcoll (which the untuned default already enables) when ucc_vs_hcoll is neutral or silent.
    basis: findings 0 and 1 (always consulted), plus 2 where the tie-break consulted it.
    notes: bands where finding 2 orders UCC and HCOLL against findings 0 and 1, then the ties
    finding 2 cannot break."""
    rows, bad, ties = [], [], []
    for lo, hi in spans(findings[:3]):
        ucc, hcoll, said = (effect_at(f, lo) for f in findings[:3])
        score = {"none": 0, "ucc": SCORE[ucc], "hcoll": SCORE[hcoll]}
        if SCORE[said] * (score["ucc"] - score["hcoll"]) < 0:  # finding 2 orders them the other way
            if bad and bad[-1][1] == lo and bad[-1][2] == said:
                bad[-1] = (bad[-1][0], hi, said)
            else:
                bad.append((lo, hi, said))
        best = max(score.values())
        winners = [c for c in COMPONENTS if score[c] == best]
        basis = [0, 1]
        if len(winners) == 1 or "none" in winners:  # COMPONENTS puts none first
            comp = winners[0]
        else:
            basis = [0, 1, 2]
            comp = "ucc" if said == "better" else "hcoll"
            if said not in ("better", "worse"):
                ties.append((lo, hi, said))
        if rows and rows[-1]["component"] == comp:  # neighbours that choose alike: one band
            rows[-1]["to"] = size_value(hi)
            rows[-1]["basis"] = sorted(set(rows[-1]["basis"]) | set(basis))
        else:
            rows.append(
                {"from": size_value(lo), "to": size_value(hi), "component": comp, "basis": basis}
            )
    notes = [
        "findings disagree %s: findings 0 and 1 (UCC and HCOLL against none) make UCC %s than "
        "HCOLL, finding 2 says UCC is %s than HCOLL; transcribed as written, the choice follows "
        "findings 0 and 1" % (band_label(lo, hi), "worse" if said == "better" else "better", said)
        for lo, hi, said in bad
    ]
    notes += [
        "choice %s: UCC and HCOLL are both better than none and finding 2 (ucc_vs_hcoll) "
        "%s there, so the tie rule takes hcoll, which the untuned default already enables"
        % (band_label(lo, hi), "finds no clear difference" if said == "neutral" else "says nothing")
        for lo, hi, said in ties
    ]
    return rows, notes


def band_label(lo, hi):
    return "[%s, %s)" % (format_size(lo), "inf" if hi is None else format_size(hi))


SAME_BOTH_SIDES = re.compile(
    r"(性能が(?:向上|低下))しそれ(?:未満|以上|以下|以外)で(?:概ね|大幅に)?\1"
)


def wording_notes(findings):
    """A finding that says the same on both sides of its own boundary ('X以上で低下しそれ未満で低下')
    is transcribed as written, but reads like a slip in the study: say so."""
    return [
        "finding %d says %s on both sides of its own boundary (%s); transcribed as written, "
        "possibly a slip in the study" % (i, f["bands"][0]["effect"], f["text"])
        for i, f in enumerate(findings)
        if SAME_BOTH_SIDES.search(f["text"])
    ]


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------


def read_baseline(lines, section, expected, notes):
    """The untuned configuration a subsection compares with; a note when it differs from the rest."""
    m = one_match(
        r"全パラメータがデフォルトの組合せ（ (.*?) ）", lines, section, "untuned baseline"
    )
    knobs_said = tuple(k.strip() for k in m.group(1).split("・"))
    if knobs_said != expected:
        notes.append(
            "the untuned baseline here is %s, elsewhere %s"
            % (", ".join(knobs_said), ", ".join(expected))
        )


def placement(lines, settings, section):
    """Add nps and mapping per component from the step's NPS/placement table."""
    place = table_after(lines, "NPS とMPIプロセス分割方法を下表", section)
    nps = per_component(place.get("NPS"), section, "NPS")
    mapping = per_component(place.get("MPIプロセス分割方法"), section, "MPIプロセス分割方法")
    for comp in COMPONENTS:
        if mapping[comp] not in MAPPINGS:
            raise at(section, "unknown placement %r" % mapping[comp])
        settings[comp]["nps"] = knob("nps", int(nps[comp]), section)
        settings[comp]["mapping"] = MAPPINGS[mapping[comp]]


def summary_table(sections, n, m, coll):
    """The collective's {ucx_tls, ucx_rndv_thresh, ucx_zcopy_thresh} in the N-M-0 table (2+ nodes)."""
    section = "%d-%d-0" % (n, m)
    table = table_after(sections[section][1], "下表は、各MPI集合通信関数の最適な UCX_TLS", section)
    row = table.get(coll.capitalize())
    if row is None:
        raise at(section, "the summary table has no %s row" % coll)
    return {
        name: knob(name, row.get(name.upper()), section)
        for name in ("ucx_tls", "ucx_rndv_thresh", "ucx_zcopy_thresh")
    }


def cross_check(lines, section, published, one_node, notes):
    """Compare the step-1/2 sentences and the referenced 1-node optimum with the N-M-0 table.

    Disagreements become notes; the published table values stay (the caller uses them)."""
    n, m, k = section.split("-")
    intra = re.search(r"intra:([^,]+)", published["ucx_rndv_thresh"]).group(1)
    ref = one_match(
        r"ノード内の UCX_RNDV_THRESH の最適値は、 \[(\d+-\d+-\d+) (\w+)\]\([^)]*\) の"
        r"(?: (HCOLL|UCC|No COLL) の)?結果から(\S+?)としています",
        lines,
        section,
        "intra-node optimum",
    )
    ref_sec, ref_name, ref_comp, stated = ref.groups()
    stated = knob("ucx_rndv_thresh", stated, section)
    expected_ref = "1-%s-%s" % (m, k)
    if ref_sec != expected_ref or ref_name.lower() != COLLECTIVES[int(k)]:
        notes.append(
            "the intra-node optimum refers to %s %s, expected %s %s"
            % (ref_sec, ref_name, expected_ref, COLLECTIVES[int(k)].capitalize())
        )
    if stated != intra:
        notes.append(
            "step 1 states the intra-node optimum as %s (from %s), the %s-%s-0 table gives "
            "intra:%s; the table value is used" % (stated, ref_sec, n, m, intra)
        )
    comp = COMPONENT_COLUMNS[ref_comp] if ref_comp else "hcoll"
    ref_value = one_node.get(ref_sec, {}).get(comp, {}).get("ucx_rndv_thresh")
    if ref_value != stated:
        notes.append(
            "step 1 states the intra-node optimum as %s from %s, but %s's %s table gives %s"
            % (stated, ref_sec, ref_sec, "HCOLL" if comp == "hcoll" else ref_comp, ref_value)
        )
    for name in ("ucx_rndv_thresh", "ucx_tls", "ucx_zcopy_thresh"):
        step = "step 2" if name == "ucx_zcopy_thresh" else "step 1"
        sentence = r"以上より、 %s を (\S+) とした場合" % name.upper()
        said = knob(
            name, one_match(sentence, lines, section, "%s %s" % (step, name)).group(1), section
        )
        if said != published[name]:
            notes.append(
                "%s sets %s to %s, the %s-%s-0 table gives %s; the table value is used"
                % (step, name.upper(), said, n, m, published[name])
            )


def check_headings(sections, n, m, k, key):
    """The heading words must agree with the chapter/section numbers this importer assumes."""
    chapter = sections.get(str(n), ("", []))[0]
    if chapter != "%dノード" % NODES[n]:
        raise SeedError("chapter %d is titled %r, expected %dノード" % (n, chapter, NODES[n]))
    sec_title = sections.get("%d-%d" % (n, m), ("", []))[0]
    if not re.fullmatch(r"(?:ノード当たり)?%d MPIプロセス" % PPN[m], sec_title):
        raise SeedError(
            "section %d-%d is titled %r, expected %d MPIプロセス" % (n, m, sec_title, PPN[m])
        )
    if sections[key][0] != COLLECTIVES[k].capitalize():
        raise SeedError(
            "section %s is titled %r, expected %s"
            % (key, sections[key][0], COLLECTIVES[k].capitalize())
        )


def read_case(sections, n, m, k, one_node):
    """One case dict in the README's key order."""
    key = "%d-%d-%d" % (n, m, k)
    if key not in sections:
        raise SeedError("the seed has no section %s" % key)
    check_headings(sections, n, m, k, key)
    lines = sections[key][1]
    notes = []
    case = {"nodes": NODES[n], "ppn": PPN[m], "collective": COLLECTIVES[k], "section": key}
    if NODES[n] == 1:
        # UCX_RNDV_THRESH per component from its own table
        rndv = table_after(lines, "各集合通信コンポーネントの UCX_RNDV_THRESH を下表", key)
        thresh = per_component(rndv.get("UCX_RNDV_THRESH"), key, "UCX_RNDV_THRESH")
        settings = {
            c: {"ucx_rndv_thresh": knob("ucx_rndv_thresh", thresh[c], key)} for c in COMPONENTS
        }
        one_node[key] = settings
    else:
        published = summary_table(sections, n, m, COLLECTIVES[k])
        cross_check(lines, key, published, one_node, notes)
        settings = {comp: dict(published) for comp in COMPONENTS}
    read_baseline(lines, key, BASELINE_1NODE if NODES[n] == 1 else BASELINE_MULTI, notes)
    placement(lines, settings, key)
    case["settings"] = {
        comp: {name: settings[comp][name] for name in SETTING_ORDER if name in settings[comp]}
        for comp in COMPONENTS
    }
    if NODES[n] == 1:
        case["unstated"] = {
            "ucx_tls": "not measured on 1 node: the study varies UCX_TLS only for 2+ nodes (note 1)",
            "ucx_zcopy_thresh": "not measured on 1 node: the study varies UCX_ZCOPY_THRESH only for "
            "2+ nodes (note 3)",
        }
    case["findings"] = read_findings(lines, key)
    case["choice"], choice_notes = derive_choice(case["findings"])
    notes += wording_notes(case["findings"]) + choice_notes
    if notes:
        case["notes"] = notes
    return case


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


def import_seed(text):
    """Seed 000 markdown text -> the tuning table as a dict (README key order)."""
    sections = split_headings(text)
    title = front_matter_title(text)
    if "0" not in sections:
        raise SeedError("the seed has no chapter 0 (概要)")
    ov = read_overview(sections["0"][1])
    one_node = {}  # in the numbers' order, 1-node cases first: 2+ nodes refer back to them
    cases = [read_case(sections, *nmk, one_node) for nmk in product(NODES, PPN, COLLECTIVES)]
    platform = (
        "%s (SMT disabled), cluster network (all 2+-node runs on instances under one leaf "
        "switch), Oracle Linux %s-based HPC cluster networking image No.%s"
        % (ov["shape"], ov["os"], ov["image"])
    )
    return {
        "schema": 1,
        "platform": PLATFORM,
        "title": title,
        "mpi": {"flavour": "openmpi", "version": ov["openmpi"]},
        "ucx_version": None,
        "provenance": {
            "document": "OCI HPC tutorial: %s" % title,
            "source": SOURCE,
            "platform": platform,
            "mpi": "Open MPI %s" % ov["openmpi"],
            "benchmark": "Intel MPI Benchmarks %s (IMB-MPI1)" % ov["imb"],
            "command": ov["command"],
            "msglog_max": ov["msglog_max"],
            "method": "%d runs per case; drop the largest and smallest; arithmetic mean of the other %d"
            % (ov["runs"], ov["kept"]),
            "date": None,
            "notes": [
                "The study does not state its UCX version (ucx_version: null). Its UCX_RNDV_THRESH "
                "values use the intra:/inter: keys, which UCX accepts from 1.17 on, so it ran UCX >= 1.17.",
                "1 node: the study tunes UCX_RNDV_THRESH, NPS and placement per component; UCX_TLS and "
                "UCX_ZCOPY_THRESH are varied only for 2+ nodes (notes 1 and 3), so 1-node cases list "
                "them under unstated.",
                "1 node: the untuned baseline the study compares with is UCX_RNDV_THRESH=auto, "
                "coll_hcoll_enable=1, coll_ucc_enable=0 (no UCX_ZCOPY_THRESH); baseline below is the "
                "2+-node wording, which adds UCX_ZCOPY_THRESH=auto.",
                "2+ nodes: UCX_TLS, UCX_RNDV_THRESH and UCX_ZCOPY_THRESH are the N-M-0 table of each "
                "section. Steps 1 and 2 measured them with HCOLL on (the default), NPS1 and block "
                "placement; step 3 then used them for all three components, so they are the same for "
                "none, ucc and hcoll. NPS and placement are the step-3 table per component.",
                "2+ nodes: the intra-node UCX_RNDV_THRESH is the 1-node optimum of the same ppn and "
                "collective (notes 13-15); each case's step-1 and step-2 sentences and that 1-node "
                "value were checked against the N-M-0 table, and any disagreement is a case note.",
                "findings: text verbatim without markdown bold; bands are [from, to) in bytes. The "
                "study's limits are inclusive powers of two: X以下 -> to 2X, X以上 -> from X, "
                "X未満 -> to X, XからYの間 (also XからYで, XからYまで, XとYの間) -> from X to 2Y; "
                "それ未満/それ以下 = below the preceding range, それ以上 = above it, それ以外 = "
                "everywhere else; 概ね/ほぼ/大幅に change no direction (they are in en).",
                "choice: derived by tuning-tables/README.md 'How a component choice is derived'; "
                "basis lists findings 0 and 1 (always consulted) and 2 where the UCC/HCOLL tie-break "
                "was consulted.",
            ],
        },
        "baseline": {
            "text": ", ".join(BASELINE_MULTI),
            "knobs": {"ucx_rndv_thresh": "auto", "ucx_zcopy_thresh": "auto", "component": "hcoll"},
        },
        "cases": cases,
    }


# ---------------------------------------------------------------------------------------------
# YAML output
# ---------------------------------------------------------------------------------------------

FLOW_WIDTH = 150  # a mapping of scalars shorter than this is written on one line


def scalar(value):
    """One YAML scalar: a string plain when it reads back as the same string, else JSON, which
    YAML reads as written (null, true, 5, "quoted")."""
    if not isinstance(value, (str, int, type(None))):  # a bool is an int
        raise TypeError("cannot write %r" % (value,))
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
        if yaml.safe_load(value) == value:
            return value
    return json.dumps(value, ensure_ascii=False)


def flow(value):
    """Single-line form of a scalar, a list of scalars or a mapping of those; None if not flat."""
    if isinstance(value, dict):
        if any(isinstance(item, dict) or flow(item) is None for item in value.values()):
            return None
        return "{%s}" % ", ".join("%s: %s" % (scalar(k), flow(v)) for k, v in value.items())
    if isinstance(value, list):
        if any(isinstance(item, (dict, list)) for item in value):
            return None
        return "[%s]" % ", ".join(scalar(item) for item in value)
    return scalar(value)


def block(value, indent):
    """Lines of a mapping or list in block style; a flat member goes on one line, a flat mapping
    (and a mapping's flat list) only when that line fits in FLOW_WIDTH."""
    pad, in_map = " " * indent, isinstance(value, dict)
    lines = []
    for key, item in value.items() if in_map else ((None, item) for item in value):
        lead = pad + ("%s: " % scalar(key) if in_map else "- ")
        one = flow(item)
        wide = isinstance(item, dict) or (in_map and isinstance(item, list))
        if one is not None and not (wide and len(lead + one) > FLOW_WIDTH):
            lines.append(lead + one)
        elif in_map:
            lines += [lead.rstrip()] + block(item, indent + 2)
        else:  # the member's first line goes after the "- "
            inner = block(item, indent + 2)
            lines += [lead + inner[0].lstrip()] + inner[1:]
    return lines


def dump_table(table, seed_digest):
    """The table as YAML text with a header saying where it comes from and how to regenerate it."""
    header = [
        "# GENERATED by tunedmpi.importers.seed000 from %s -- do not edit by hand." % SOURCE,
        "# seed sha256: %s" % seed_digest,
        "# Regenerate (from the repository root):",
        "#   PYTHONPATH=src python -m tunedmpi.importers.seed000 ../%s \\" % SOURCE,
        "#       tuning-tables/%s/openmpi-%s.yaml" % (PLATFORM, table["mpi"]["version"]),
        "# Schema: tuning-tables/README.md.",
    ]
    text = "\n".join(header + block(table, 0)) + "\n"
    if yaml.safe_load(text) != table:  # the writer must never change a value
        raise SeedError("internal error: the YAML written does not read back as the table")
    return text


def render_seed_file(seed_path):
    """Read a seed file and return (table dict, YAML text)."""
    raw = read_bytes(seed_path)
    table = import_seed(raw.decode("utf-8"))
    return table, dump_table(table, hashlib.sha256(raw).hexdigest())


def main(argv=None):
    """``python -m tunedmpi.importers.seed000 SEED_FILE OUT_YAML``: exit 0, or 2 with the reason."""
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 2 or args[0] in ("-h", "--help"):
        print("usage: python -m tunedmpi.importers.seed000 SEED_FILE OUT_YAML", file=sys.stderr)
        return 2
    seed, out = args
    try:
        table, text = render_seed_file(seed)
        write_atomic(out, text)
    except (OSError, UnicodeDecodeError, SeedError) as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 2
    cases = table["cases"]
    noted = sum(1 for c in cases if c.get("notes"))
    print(
        "wrote %s: %d cases, %d component settings, %d cases with notes"
        % (out, len(cases), sum(len(c["settings"]) for c in cases), noted)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
