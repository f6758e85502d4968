"""`bench --nproc-per-node N`: a layout the launcher cannot use is refused in the flags the user typed. It named
DistConfig's fields — `error: nnodes='2' needs rdzv_endpoint HOST:PORT`, `drop node_rank` — words no flag has."""

import pytest

from tests.conftest import main_in_process

BASE = ("bench", "llm-train", "--model", "tiny-llama", "--nproc-per-node", "2", "--no-save", "--quick")


@pytest.mark.parametrize(("flags", "expected"), [
    (("--nnodes", "2"), "--nnodes '2' needs --rdzv-endpoint HOST:PORT"),
    (("--nnodes", "2", "--rdzv-endpoint", "h:1", "--node-rank", "5"), "--node-rank 5 is out of range; expected 0..1 "
                                                                      "for --nnodes 2"),
    (("--nnodes", "1:2", "--rdzv-endpoint", "h:1", "--node-rank", "0"), "drop --node-rank"),
])
def test_layout_errors_name_the_flags(capsys, flags, expected):
    code, out, err = main_in_process(capsys, *BASE, *flags)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1, err
    assert expected in " ".join(err.split()), err
    assert "rdzv_endpoint" not in err and "node_rank" not in err
