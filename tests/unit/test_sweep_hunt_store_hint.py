"""A store that cannot be opened for writing made `accelkit sweep` answer "…; or pass --no-save to measure without
storing" — a flag sweep does not have (a sweep always stores). Its error now offers only what works; a command with
--no-save still offers it."""

from __future__ import annotations

import pytest

from accelkit.cli.store import open_for_saving
from accelkit.core import AccelkitError
from tests.conftest import main_in_process


def test_sweep_on_an_unopenable_store_offers_no_missing_flag(capsys, tmp_path, _isolated_home):
    _isolated_home.mkdir(parents=True)
    (_isolated_home / "results.db").write_bytes(b"")  # a 0-byte store is refused, not overwritten
    path = tmp_path / "s.yaml"
    path.write_text("kind: plan\nhardware: h100\nworkloads: {tiny-llama: {task: train}}\n")
    code, out, err = main_in_process(capsys, "sweep", str(path), "--no-progress")
    assert code == 1 and out == ""
    assert err.startswith(f"error: the results store {_isolated_home / 'results.db'} is an empty (0-byte) file")
    assert "--no-save" not in err and len(err.strip().splitlines()) == 1
    code, out, err = main_in_process(capsys, "sweep", str(path), "--no-save")
    assert code == 2  # (the flag the old message offered)


def test_a_command_with_no_save_still_offers_it(_isolated_home):
    _isolated_home.mkdir(parents=True)
    (_isolated_home / "results.db").write_bytes(b"")
    with pytest.raises(AccelkitError, match=r"; or pass --no-save to measure without storing$"):
        open_for_saving(True)
