"""Bad input values a hostile site admin tried (issue 29, part A): each must be refused with one
line `file[:line]: key: problem (fix: ...)` (or argparse's one line for an option) and exit 2,
never a traceback, and nothing may be written."""

import pytest


@pytest.mark.parametrize("value", ["inf", "nan", "1e400", "0", "-1", "1e9"])
@pytest.mark.parametrize("verb", [["validate"], ["sweep", "--site", "local"]])
def test_timeout_must_be_positive_and_finite(run_cli, capsys, verb, value):
    with pytest.raises(SystemExit) as exc:
        run_cli(*verb, "--timeout", value)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "--timeout" in err and "below 604800" in err
