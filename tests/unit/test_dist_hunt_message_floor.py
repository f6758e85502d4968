"""`hw probe --collectives --max-message-size` below one fp32 element per rank (found in a hunt): the ranks split a
message evenly, so the smallest they measure is 4 B × ranks — `--max-message-size 4` (the documented least) on 2 ranks
measured and stored 8-byte messages, larger than the largest asked for. Refused, exit 2, naming the least."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.distributed.collectives import CollectiveConfig, message_elements, probe_collectives
from accelkit.distributed.launch import DistConfig


@pytest.mark.parametrize(("max_size", "nproc"), [(4, 2), (7, 2), (11, 3)])
def test_a_largest_message_below_one_element_per_rank_is_refused(max_size, nproc):
    assert message_elements(max_size, nproc) * 4 > max_size  # what the ranks would have measured instead
    with pytest.raises(UserError, match=rf"^--max-message-size {max_size}B is below {4 * nproc} B, the smallest message "
                                        rf"{nproc} ranks split evenly .*; give {4 * nproc}B or more$"):
        probe_collectives(CollectiveConfig(device="cpu", max_size_bytes=max_size), DistConfig(nproc_per_node=nproc))


def test_the_least_is_what_the_ranks_measure():
    assert message_elements(8, 2) * 4 == 8 and message_elements(12, 3) * 4 == 12


def test_the_cli_refuses_it_before_torchrun():
    from tests.conftest import run_cli

    proc = run_cli("hw", "probe", "--collectives", "--device", "cpu", "--quick", "--no-save", "--max-message-size", "4B")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("error: --max-message-size 4B is below 8 B, the smallest message 2 ranks split "
                                   "evenly (one 4-byte element each); give 8B or more")
