"""`bench --zero 1` was click's "'1' is not one of '0', '2', '3'": ZeRO-1 is what a Megatron/DeepSpeed user asks for
first, and the line said neither why it is missing nor what to give instead."""

from __future__ import annotations

from tests.conftest import main_in_process


def test_zero_one_says_why_and_what_to_give(capsys):
    code, out, err = main_in_process(capsys, "bench", "llm-train", "--model", "tiny-llama", "--nproc-per-node", "2",
                                     "--zero", "1", "--no-save")
    assert (code, out) == (2, "")
    assert err.startswith("error: --zero 1 (ZeRO-1: optimizer states sharded, gradients not) is not offered:"), err
    assert "give --zero 2" in err and "accelkit plan --zero 1" in err


def test_another_value_is_named_with_the_stages(capsys):
    code, _, err = main_in_process(capsys, "bench", "llm-train", "--model", "tiny-llama", "--nproc-per-node", "2",
                                   "--zero", "4", "--no-save")
    assert code == 2 and err.strip() == "error: --zero '4' is not a stage; give 0 (DDP), 2 or 3 (FSDP2)"
