"""`accelkit plan --top K` where fewer than K layouts exist printed fewer rows without a word (--top 5 on one device:
one row); the table now says that these are all the layouts there are. --top K within what exists says nothing."""

from __future__ import annotations

from tests.conftest import main_in_process

_INFER = ["plan", "--model", "tiny-llama", "--task", "infer", "--hardware", "h100"]


def test_top_beyond_the_layouts_says_all_are_shown(capsys):
    code, out, err = main_in_process(capsys, *_INFER, "--num-devices", "1", "--top", "5")
    assert code == 0, err
    assert "--top 5: 1 layout on 1 × H100-SXM5-80GB — all there are" in out


def test_top_within_the_layouts_adds_no_line(capsys):
    code, out, err = main_in_process(capsys, *_INFER, "--num-devices", "2", "--top", "1")
    assert code == 0, err
    assert "all there are" not in out
