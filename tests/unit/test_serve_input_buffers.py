"""The persistent input buffers: the packed layout, views reused per shape, and the host block tables that
copy only appended block ids (and rewrite a table that came back after a preemption)."""

import numpy as np
import pytest
import torch

from accelkit.serve.input_buffers import HostBlockTables, InputBuffers, Layout
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.sequence import Sequence


def test_layout_packs_the_fields_back_to_back():
    layout = Layout(num_tokens=5, num_seqs=2, width=3)
    slices = layout.slices()
    assert list(slices) == ["input_ids", "positions", "slot_mapping", "seq_lens", "query_start", "logits_indices",
                            "block_tables"]
    sizes = [s.stop - s.start for s in slices.values()]
    assert sizes == [5, 5, 5, 2, 3, 2, 6] and layout.size == sum(sizes)
    assert all(a.stop == b.start for a, b in zip(list(slices.values()), list(slices.values())[1:], strict=False))


def test_views_share_memory_and_are_reused_per_layout():
    buffers = InputBuffers(max_tokens=8, max_seqs=4, max_width=4, device=torch.device("cpu"))
    layout = Layout(4, 2, 3)
    host, dev = buffers.host_views(layout), buffers.device_views(layout)
    host["block_tables"][1, 2] = 42
    host["positions"][:] = [7, 8, 9, 10]
    assert dev["block_tables"][1, 2] == 42 and dev["positions"].tolist() == [7, 8, 9, 10]  # CPU: one buffer
    assert buffers.host_views(layout) is host and buffers.device_views(layout) is dev
    with pytest.raises(ValueError, match="int64 slots"):
        buffers.host_views(Layout(100, 4, 4))


def _seq(table, preemptions=0):
    seq = Sequence("r", [1, 2, 3], SamplingParams())
    seq.block_table = list(table)
    seq.num_preemptions = preemptions
    return seq


def test_host_block_tables_follow_appends_preemptions_and_releases():
    tables = HostBlockTables(max_rows=1, max_blocks=6)
    seq = _seq([4, 9])
    row = tables.row(seq)
    assert tables.pool[row, :2].tolist() == [4, 9]
    seq.block_table.append(7)  # a decode crossed into a new block
    assert tables.row(seq) == row and tables.pool[row, :3].tolist() == [4, 9, 7]
    seq.block_table = [5, 9, 7]  # preempted and re-admitted: a different table of the same length
    seq.num_preemptions = 1
    assert tables.pool[tables.row(seq), :3].tolist() == [5, 9, 7]
    seq.block_table = [5]  # shorter: rewritten as well
    seq.num_preemptions = 2
    assert tables.pool[tables.row(seq), :1].tolist() == [5]
    other = _seq([1, 2, 3, 4])
    other_row = tables.row(other)  # the pool grows past max_rows
    assert other_row != row and tables.pool[other_row, :4].tolist() == [1, 2, 3, 4]
    tables.release(seq.seq_id)
    third = _seq([8])
    assert tables.row(third) == row  # a released row is reused
    rows = [tables.row(other), tables.row(third)]
    assert np.array_equal(tables.pool[rows, :2], [[1, 2], [8, 9]])  # stale tail entries past a table's length


def test_a_sequence_without_blocks_gets_no_row():
    """A finished sequence (blocks freed, row released) must not be handed a recycled row: it holds another's table."""
    tables = HostBlockTables(max_rows=2, max_blocks=4)
    done = _seq([3, 6])
    tables.row(done)
    tables.release(done.seq_id)
    done.block_table = []
    with pytest.raises(ValueError, match="no KV blocks"):
        tables.rows([done])
    assert not tables._entries
