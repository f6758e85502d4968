"""`accelkit results show -1` / `results delete -5 --yes`: a negative id is refused as an id (exit 2, naming it),
not parsed as an unknown option ('No such option: -1'); ids count from 1 and no negative id counts from the end."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("args", [["show", "-1"], ["show", "--json", "-2"], ["delete", "-5", "--yes"],
                                  ["show", "-0.5"]])
def test_a_negative_id_is_named(args: list[str]):
    r = run_cli("results", *args)
    value = next(a for a in args[1:] if a[0] == "-" and a[1] != "-")
    assert r.returncode == 2
    assert r.stderr.strip() == (f"error: result id {value} is not valid: ids are whole numbers from 1 (no negative "
                                "ids); `accelkit results list` shows them")


def test_options_still_parse():
    r = run_cli("results", "show", "1", "--jsn")
    assert r.returncode == 2 and "--jsn" in r.stderr
