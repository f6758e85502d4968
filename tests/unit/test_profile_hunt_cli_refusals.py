"""`accelkit profile` refusals found in a hunt: a workload value the config refuses named its field (`size='huge'
is not valid`) instead of the flag typed; an --out folder that cannot be made was found only once the model was
built and profiled (torch imported, ~6 s) — now made, or refused, before the model is built, after the flags are
checked (so a bad flag makes no folder). The text view shows the profiler's step range apart from the operators."""

from __future__ import annotations

from tests.conftest import main_in_process


def test_a_workload_value_is_named_by_its_flag(capsys, tmp_path):
    out_dir = tmp_path / "prof"
    code, out, err = main_in_process(capsys, "profile", "bert", "--size", "huge", "--out", str(out_dir), "--no-save")
    assert (code, out) == (2, "")
    assert err.startswith("error: --size 'huge' is not valid; expected one of 'tiny'"), err
    assert not out_dir.exists()  # refused before the folder is made


def test_an_out_folder_that_cannot_be_made_is_refused_before_the_model_is_built(capsys):
    code, out, err = main_in_process(capsys, "profile", "bert", "--size", "tiny", "--out", "/proc/nope",
                                     "--no-save")
    assert (code, out) == (2, "")
    assert err.strip() == "error: --out /proc/nope: the folder cannot be created (No such file or directory); give another"
    assert "profiling" not in err  # (no progress: nothing was built)
