import pytest

from tunedmpi.tables import knobs
from tunedmpi.tables.units import SizeError, format_human, format_size, parse_size


@pytest.mark.parametrize("text", ["32KB", "32kb", "32k", "32K", "32768", 32768, " 32 KB "])
def test_the_spellings_of_32kb_are_one_size(text):
    assert parse_size(text) == 32768
    assert format_size(parse_size(text)) == "32kb"


@pytest.mark.parametrize(
    "text,size,ucx",
    [
        ("0", 0, "0"),
        ("512", 512, "512"),
        ("512B", 512, "512"),
        ("1mb", 1 << 20, "1mb"),
        ("4MB", 4 << 20, "4mb"),
        ("1536", 1536, "1536"),
        ("2g", 2 << 30, "2gb"),
        ("1024k", 1 << 20, "1mb"),
    ],
)
def test_sizes_round_trip_to_ucx_syntax(text, size, ucx):
    assert parse_size(text) == size
    assert format_size(size) == ucx


@pytest.mark.parametrize("bad", ["32XB", "-4kb", "4.5kb", "", "kb", True, None, [1]])
def test_bad_sizes_are_refused(bad):
    with pytest.raises(SizeError):
        parse_size(bad)


def test_special_values_only_where_allowed():
    assert parse_size("AUTO", allow_special=True) == "auto"
    assert parse_size("inf", allow_special=True) == "inf"
    with pytest.raises(SizeError):
        parse_size("auto")


def test_human_sizes_as_the_studies_write_them():
    assert [format_human(v) for v in (256, 32768, 1 << 20, None)] == ["256B", "32KB", "1MB", ""]


@pytest.mark.parametrize(
    "value,version,normal",
    [
        ("intra:32KB,inter:128KB", (1, 18), "intra:32kb,inter:128kb"),
        ("inter:128k,intra:32k", (1, 18), "intra:32kb,inter:128kb"),
        ("auto,intra:32kb", (1, 18), "auto,intra:32kb"),
        ("Auto", (1, 11, 2), "auto"),
        ("64KB", (1, 11, 2), "64kb"),
        ("intra:32kb,inter:128kb", None, "intra:32kb,inter:128kb"),
    ],
)
def test_rndv_threshold_forms(value, version, normal):
    assert knobs.normalise("ucx_rndv_thresh", value, version) == normal


@pytest.mark.parametrize(
    "value,version,problem",
    [
        ("intra:64k", (1, 18), "lone 'intra:' key is a fatal error"),
        ("inter:64k", None, "lone 'inter:' key"),
        ("intra:32kb,inter:128kb", (1, 16), "accepts no intra:/inter: keys"),
        ("auto,intra:32kb", (1, 11, 2), "accepts no intra:/inter: keys"),
        ("32kb,64kb", (1, 18), "two default values"),
    ],
)
def test_rndv_threshold_illegal_for_the_ucx_version(value, version, problem):
    with pytest.raises(knobs.KnobError) as exc:
        knobs.normalise("ucx_rndv_thresh", value, version)
    assert problem in exc.value.problem
    assert exc.value.fix


def test_tls_normal_form_and_refusals():
    assert knobs.normalise("ucx_tls", "SELF,SM,RC") == "self,sm,rc"
    assert knobs.normalise("ucx_tls", ["self", "sm", "ud"]) == "self,sm,ud"
    assert knobs.normalise("ucx_tls", "^tcp") == "^tcp"
    for bad in ("self,sm,rc;rm -rf /", "self,,sm", "self,self", "", 3):
        with pytest.raises(knobs.KnobError):
            knobs.normalise("ucx_tls", bad)


def test_unknown_knob_names_the_known_ones():
    with pytest.raises(knobs.KnobError) as exc:
        knobs.normalise("ucx_tsl", "all")
    assert "ucx_tls" in exc.value.fix


def test_version_tuple():
    assert knobs.version_tuple("1.18.1") == (1, 18, 1)
    assert knobs.version_tuple(None) is None
    with pytest.raises(knobs.KnobError):
        knobs.version_tuple("1.x")
