"""accelkit.distributed without torch: bus-bandwidth arithmetic (nccl-tests), the torchrun command line, sweep
files and grid expansion, copying a remote point's rows, and calibration from a collective probe."""

from __future__ import annotations

import math
import socket

import pytest

from accelkit.core import Estimate, Measurement, UserError
from accelkit.distributed.collectives import bus_bandwidth, bus_factor, headline, message_elements
from accelkit.distributed.launch import DistConfig, torchrun_command
from accelkit.distributed.rank_failures import notes_only
from accelkit.sweep import Point, SweepSpec, collect, expand, load_sweep


# ---- bus bandwidth --------------------------------------------------------------------------------------
def test_bus_factors_follow_nccl_tests():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert bus_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert bus_factor("all_reduce", 2) == 1.0
    # 1 GB all-reduce in 0.5 s on 4 ranks: algbw 2 GB/s, busbw 2 · 2·3/4 = 3 GB/s
    assert bus_bandwidth("all_reduce", 1e9, 0.5, 4) == pytest.approx(3e9)
    assert bus_bandwidth("all_gather", 1e9, 0.5, 4) == pytest.approx(1.5e9)
    with pytest.raises(ValueError, match="op='broadcast'"):
        bus_factor("broadcast", 2)


def test_message_elements_split_evenly_and_headline_is_largest():
    assert message_elements(1024, 2) == 256
    assert message_elements(1000, 3) % 3 == 0
    assert message_elements(4, 8) == 8  # never fewer than one element per rank
    rows = [{"op": "all_reduce", "size_bytes": s, "busbw_gbps": s / 10} for s in (10, 1000, 100)]
    assert headline(rows)["size_bytes"] == 1000
    assert headline(rows, "all_gather") is None


# ---- torchrun command line --------------------------------------------------------------------------------
def _flags(cmd: list[str]) -> list[str]:
    return cmd[3:cmd.index("-m", 3)]


def test_one_node_is_standalone():
    cmd = torchrun_command(DistConfig(nproc_per_node=2), "job.json", python="py")
    assert cmd[:3] == ["py", "-m", "torch.distributed.run"]
    assert _flags(cmd) == ["--nproc-per-node", "2", "--nnodes", "1", "--standalone"]
    assert cmd[-3:] == ["-m", "accelkit.distributed.worker", "job.json"]


def test_fixed_nodes_with_rank_use_static_rendezvous():
    cfg = DistConfig(nproc_per_node=8, nnodes="4", node_rank=2, rdzv_endpoint="node0:29400")
    assert cfg.rendezvous == "static"
    assert _flags(torchrun_command(cfg, "j")) == [
        "--nproc-per-node", "8", "--nnodes", "4", "--rdzv-backend", "static", "--rdzv-endpoint", "node0:29400",
        "--node-rank", "2"]


def test_elastic_range_passes_through_to_c10d():
    cfg = DistConfig(nproc_per_node=8, nnodes="2:4", rdzv_endpoint="head:29400", rdzv_id="job7", max_restarts=3)
    assert cfg.is_elastic and cfg.rendezvous == "c10d"
    assert _flags(torchrun_command(cfg, "j")) == [
        "--nproc-per-node", "8", "--nnodes", "2:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "head:29400",
        "--rdzv-id", "job7", "--max-restarts", "3"]


@pytest.mark.parametrize(("fields", "message"), [
    ({"nnodes": "2"}, "needs rdzv_endpoint"),
    ({"nnodes": "2:4", "rdzv_endpoint": "h:1", "node_rank": 0}, "elastic"),
    ({"nnodes": "2", "rdzv_endpoint": "h:1", "node_rank": 2}, "node_rank=2 is out of range"),
    ({"nnodes": "4:2", "rdzv_endpoint": "h:1"}, "1 <= MIN <= MAX"),
    ({"nnodes": "two"}, "expected N or MIN:MAX"),
    ({"nnodes": "2", "rdzv_endpoint": "nohost"}, "HOST:PORT"),
    ({"nnodes": "2", "rdzv_endpoint": "h:99999"}, "port 99999, out of range"),
    ({"nnodes": "2", "rdzv_endpoint": "h:0"}, "PORT 1..65535"),
    ({"zero": 1}, "zero=1 is not valid"),
])
def test_bad_layouts_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        DistConfig.from_dict(fields)


# ---- sweep files and the grid -------------------------------------------------------------------------------
def test_grid_is_the_product_in_order():
    spec = SweepSpec(name="g", workloads={"llm-train": {"model": "tiny-llama"}, "resnet": {"size": "tiny"}},
                     precisions=("fp32", "bf16"), batch_sizes=(2, 4), layouts=({}, {"nproc_per_node": 2, "zero": 3}))
    points = expand(spec)
    assert len(points) == 16
    assert [p.index for p in points] == list(range(16))
    assert len({p.key for p in points}) == 16
    first = points[0]
    assert (first.workload, first.precision, first.batch_size, first.layout) == ("llm-train", "fp32", 2, {})
    assert points[1].layout == {"nproc_per_node": 2, "zero": 3}
    assert points[-1].key == "resnet size=tiny · bf16 · b4 · nproc_per_node=2,zero=3"


def test_loadtest_rates_axis():
    spec = SweepSpec(name="l", kind="loadtest", workloads={"m": {}}, rates=(1, "4", "inf"),
                     loadtest={"base_url": "http://127.0.0.1:9"})
    assert [p.rate for p in expand(spec)] == [1.0, 4.0, math.inf]
    assert expand(spec)[2].to_dict()["rate"] == "inf"


@pytest.mark.parametrize(("text", "message"), [
    ("workloads: {bert: {}}\nprecisions: [fp32, fp9]\n", r"precisions\[1\]='fp9' is not valid"),
    ("workloads: {bert: {}}\nlayouts: [{}, {nproc: 2}]\n", r"layouts\[1\] has no field nproc"),
    # the launch's own checks at load, not when the point runs
    ("workloads: {bert: {}}\nlayouts: [{nproc_per_node: 2, collective_timeout_s: 0}]\n",
     r"layouts\[0\]: collective_timeout_s=0.0 is out of range; expected >= 1"),
    ("workloads: {bert: {}}\nlayouts: [{nproc_per_node: 0}]\n", r"layouts\[0\]: nproc_per_node=0 is out of range"),
    ("workloads: {bert: {}}\nlayouts: [{collective_timeout_s: 60}]\n",  # ran a 1-rank torchrun
     r"layouts\[0\] sets collective_timeout_s but not nproc_per_node: a layout with keys is a torchrun launch"),
    ("workloads: {bert: {}}\nbench: {device: cpu}\nlayouts: [{nproc_per_node: 2, backend: nccl}]\n",
     r"layouts\[0\] backend nccl needs CUDA GPUs, but bench runs on the CPU"),
    ("workloads: {bert: {}}\nrates: [1]\n", "rates applies to kind loadtest"),
    ("kind: loadtest\nworkloads: {m: {}}\nrates: [1, fast]\n", r"rates\[1\]"),
    ("workloads: {bert: {}}\nbatch_size: [1]\n", "has no field batch_size"),
    ("kind: plan\nworkloads: {tiny-llama: {}}\n", "hardware is required"),
    ("workloads: {bert: {}\nprecisions: [fp32]\n", "line 2, column"),
    ("- a\n- b\n", "expected a mapping"),
])
def test_sweep_file_errors_name_the_field(tmp_path, text, message):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        load_sweep(path)


def test_a_sweep_layout_sets_the_launch_collective_timeout_and_backend(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("workloads: {resnet: {}}\nlayouts: [{nproc_per_node: 2, collective_timeout_s: 120, backend: gloo}]\n")
    (point,) = expand(load_sweep(path))
    dist = DistConfig.from_dict(point.layout)  # what the bench point launches with
    assert (dist.collective_timeout_s, dist.effective_collective_timeout_s, dist.backend) == (120, 120, "gloo")


def test_sweep_name_defaults_to_the_file(tmp_path):
    path = tmp_path / "night.yaml"
    path.write_text("workloads:\n  bert:\n")
    spec = load_sweep(path)
    assert spec.name == "night" and spec.workloads == {"bert": {}}


# ---- a point that ran against another store is copied, ids remapped ---------------------------------------------
def test_remote_rows_are_copied_with_cross_references_remapped():
    from accelkit.results import ResultStore

    point = Point(0, "bench", "bert", {}, "fp32", None, {}, None)
    est = {"id": 41, "run_id": "r", "type": "estimate", **Estimate(kind="plan", name="e").to_dict()}
    meas = {"id": 42, "run_id": "r", "type": "measurement",
            **Measurement(kind="bench", name="m", details={"predicted": {"estimate_id": 41}}).to_dict()}
    outcome = {"status": "ok", "result_ids": [41, 42], "results": [est, meas], "host": "elsewhere", "store": "/x"}
    from accelkit.bench.record import StoreWriter

    with ResultStore() as store:
        store.add(Measurement(kind="probe", name="occupies id 1"))
        writer = StoreWriter(store)  # collect() writes through the sweep's one writer
        line = collect(point, outcome, writer, "sweep-run", "s")
        new_est, new_meas = line["result_ids"]
        assert (new_est, new_meas) == (2, 3)
        stored = store.get(new_meas)
        assert stored.run_id == "sweep-run"
        assert stored.result.details["predicted"]["estimate_id"] == new_est
        err = collect(point, {"status": "error", "error": "ValueError: boom", "host": "h"}, writer, "sweep-run", "s")
        assert store.get(err["result_ids"][0]).result.kind == "sweep-error"


# ---- calibration: a stored collective probe replaces the communication prior -------------------------------------
def test_collective_probe_feeds_the_comm_efficiency_of_a_catalog_device():
    from accelkit.hardware import get_device
    from accelkit.plan.calibrate import efficiency
    from accelkit.results import ResultStore

    h100 = get_device("h100")
    prior = efficiency(h100, "bf16")
    with ResultStore() as store:
        store.add(Measurement(kind="collectives", name="c", hardware=h100.name, details={
            "device": "cuda", "catalog_name": h100.name, "backend": "nccl", "world_size": 8,
            "largest_size_bytes": 2**30, "bus_bandwidth_gbps": {"all_reduce": 315.0}}))
    eff = efficiency(h100, "bf16")
    assert eff.comm == pytest.approx(315e9 / h100.scaleup_bandwidth_bytes_per_s)
    assert eff.comm != prior.comm
    assert any("measured all-reduce bus bandwidth 315.000 GB/s" in s for s in eff.sources)
    assert not any("stas00/ml-engineering network" in s for s in eff.sources)


# ---- the agreed timing loop: block sizes from agreed numbers only ------------------------------------------
def test_agreed_blocks_start_from_one_call_without_warmup_and_stop_at_the_cap():
    """With no warm-up iterations the loop estimated 0 s per call and sized one block of 10 million; and whole blocks
    ran past max_iterations (blocks of 10 under a cap of 25 measured 30)."""
    from accelkit.distributed.agreed_loop import AgreedRun, next_block_iterations
    from accelkit.timing import LoopConfig

    loop = LoopConfig(warmup_iterations=0, warmup_time_s=0.0, min_iterations=1, min_time_s=1.0)
    run = AgreedRun()
    assert next_block_iterations(loop, run) == 1  # no estimate yet: the first call is the estimate
    run.samples_s, run.agreed_walls_s = [0.01], [0.01]
    assert next_block_iterations(loop, run) == 10  # 0.1 s at the slowest rank's 10 ms a call
    run.samples_s, run.agreed_walls_s = [0.01] * 11, [0.01, 0.5]  # it slowed down: the next block shrinks
    assert next_block_iterations(loop, run) == 3

    capped = LoopConfig(warmup_iterations=5, min_iterations=100, min_time_s=0.0, max_iterations=25)
    run = AgreedRun(warmup_iterations=5, warmup_s=0.05)
    assert next_block_iterations(capped, run) == 3  # a tenth of the cap, rounded up
    run.samples_s, run.agreed_walls_s = [0.01] * 24, [0.03] * 8
    assert next_block_iterations(capped, run) == 1  # the last block is cut to the count remaining


# ---- which rank failed first ---------------------------------------------------------------------------------
SUMMARY = """\
  RuntimeError: [pair.cc:537] Read error [127.0.0.1]:1705: Connection reset by peer.
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_11:12:49
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 25169)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 25169
============================================================""".splitlines()


def test_a_killed_rank_comes_from_torchruns_summary_and_before_its_peer(tmp_path):
    import json
    import time

    from accelkit.distributed.rank_failures import failed_ranks, failure_message

    when = int(time.mktime(time.strptime("2026-12-01_11:12:49", "%Y-%m-%d_%H:%M:%S")))
    peer = tmp_path / "run_x" / "attempt_0" / "0"
    peer.mkdir(parents=True)
    (peer / "error.json").write_text(json.dumps({"message": {"message": "RuntimeError: Connection reset by peer", "extraInfo": {
        "timestamp": str(when), "rank": "0", "local_rank": "0", "host": "h", "time_ns": when * 10**9 + 5}}}))
    failures = failed_ranks(tmp_path, SUMMARY)
    assert [f.rank for f in failures] == [1, 0]  # same second: the rank without an exception was lost first
    # (torchrun's "localhost" is this node: named by its host name, as a rank that raised names it)
    assert failure_message(failures) == (
        f"first failure — rank 1 (host {socket.gethostname()}, local rank 1): killed by SIGKILL (exit code -9), no "
        "Python exception; then 1 more — rank 0 (host h, local rank 0): RuntimeError: Connection reset by peer")


def test_a_rank_that_lost_its_peer_comes_after_the_peer_that_died_a_second_later_on_torchruns_clock(tmp_path):
    """Rank 1 aborted; rank 0 raised "Connection reset by peer" and wrote its error file; torchrun, polling on a
    loaded machine, saw rank 1's death in the next second — and rank 0 was named first (a whole-suite run)."""
    import json
    import time

    from accelkit.distributed.rank_failures import failed_ranks, failure_message

    when = int(time.mktime(time.strptime("2026-12-01_11:12:49", "%Y-%m-%d_%H:%M:%S")))
    peer = tmp_path / "run_x" / "attempt_0" / "0"
    peer.mkdir(parents=True)
    (peer / "error.json").write_text(json.dumps({"message": {"message": "RuntimeError: [pair.cc:537] Read error "
        "[127.0.0.1]:6023: Connection reset by peer", "extraInfo": {"timestamp": str(when - 1), "rank": "0",
        "local_rank": "0", "host": "h", "time_ns": (when - 1) * 10**9}}}))
    message = failure_message(failed_ranks(tmp_path, SUMMARY))
    assert message.startswith(f"first failure — rank 1 (host {socket.gethostname()}, local rank 1): killed by "
                              "SIGKILL"), message
    # a peer's own error (not a lost connection) a second earlier is still first
    (peer / "error.json").write_text(json.dumps({"message": {"message": "ValueError: bad batch", "extraInfo": {
        "timestamp": str(when - 1), "rank": "0", "local_rank": "0", "host": "h", "time_ns": (when - 1) * 10**9}}}))
    assert failure_message(failed_ranks(tmp_path, SUMMARY)).startswith("first failure — rank 0 (host h, local rank 0): "
                                                                       "ValueError: bad batch")


def test_a_signal_torchrun_gives_by_its_code_only_is_named(tmp_path):
    """torch 2.11's torchrun (the GPU image's) prints 'exitcode : -9 (pid: …)' without '(SIGKILL)': the rank was
    said to have 'exited with code -9'. A positive code is an exit, not a signal."""
    from accelkit.distributed.rank_failures import failed_ranks

    bare = [line.replace("  (SIGKILL)", "") for line in SUMMARY]
    assert [f.what for f in failed_ranks(tmp_path, bare)] == ["killed by SIGKILL (exit code -9), no Python exception"]
    exited = [line.replace("-9 (pid: 25169)  (SIGKILL)", "3 (pid: 25169)") for line in SUMMARY]
    assert [f.what for f in failed_ranks(tmp_path, exited)] == ["exited with code 3 without a Python exception"]


def test_a_native_crash_quotes_what_it_printed_not_the_peers_or_torchs_lines(tmp_path):
    from accelkit.distributed.rank_failures import failed_ranks, failure_message

    output = [
        "W1201 11:12:40.000000 25160 torch/distributed/run.py:803] *****************************************",
        "[rank 0/2] resnet: steady state",
        "[rank0]: Traceback (most recent call last):",
        "[rank0]: RuntimeError: Connection reset by peer",
        "[rank1]: about to fail",
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
        "  what():  [enforce fail at gloo/transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes. 8 vs 4",
        "Fatal Python error: Aborted",
        "",
        "Current thread 0x00007f1d28c14b80 (most recent call first):",
        '  File "/x/worker.py", line 12 in main',
        "Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)",
        "E1201 11:12:49.973000 25160 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) "
        "local_rank: 1 (pid: 25169) of binary: /x/python",
        "a line of torchrun's report after it",
        *SUMMARY,
    ]
    message = failure_message(failed_ranks(tmp_path, output), output)
    assert message.endswith(
        "; the last output lines (rank 1's, or unmarked): [rank1]: about to fail | terminate called after throwing an "
        "instance of 'gloo::EnforceNotMet' | what(): [enforce fail at gloo/transport/tcp/pair.cc:446] "
        "op.preamble.length <= op.nbytes. 8 vs 4 | Fatal Python error: Aborted"), message
    assert failure_message(failed_ranks(tmp_path, SUMMARY)).endswith("no Python exception")  # no output: as before


_FAILED_EXIT = ("E1201 11:12:49.973000 25160 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
                "(exitcode: -9) local_rank: 1 (pid: 25169) of binary: /x/python")


@pytest.mark.parametrize("output", [
    # Rank 1 aborted while rank 0 was still starting its process group: rank 0's traceback has no ``[rank0]:`` marks
    # (torch sets that hook once the group exists) and came after the crash's line — the message quoted rank 0's
    # carets and "Connection closed by peer" as rank 1's last words (test_dist_failures, once in a full run).
    ["terminate called without an active exception",
     "Traceback (most recent call last):",
     '  File "/x/process_group.py", line 40, in start',
     "    backend_class = ProcessGroupGloo(",
     "                    ^^^^^^^^^^^^^^^^^",
     "Fatal Python error: Aborted",  # the crash's next line, written between the peer's
     "    ^^^^^^^^^^^^^^^^^^^^^^^^^^",
     "RuntimeError: Gloo connectFullMesh failed with [pair.cc:553] Connection closed by peer [127.0.0.1]:4495."],
    # Python writes a traceback line in pieces; rank 1's crash line, written whole, landed inside rank 0's
    # ``File "…"`` line, which is left out — the message quoted only "Fatal Python error: Aborted" (the next time).
    ["Traceback (most recent call last):",
     '  File "terminate called without an active exception',
     '/x/process_group.py", line 40, in start',
     "    backend_class = ProcessGroupGloo(",
     "Fatal Python error: Aborted",
     "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:14555."],
], ids=["traceback-after-the-crash", "crash-inside-a-traceback-line"])
def test_a_peers_unmarked_traceback_does_not_hide_the_crashs_lines(tmp_path, output):
    from accelkit.distributed.rank_failures import failed_ranks, failure_message

    output = [*output, _FAILED_EXIT, *SUMMARY]
    message = failure_message(failed_ranks(tmp_path, output), output)
    assert message.endswith("; the last output lines (rank 1's, or unmarked): terminate called without an active "
                            "exception | Fatal Python error: Aborted"), message


def test_error_files_order_ranks_by_nanoseconds_within_a_second(tmp_path):
    import json

    from accelkit.distributed.rank_failures import failed_ranks

    for rank, ns in ((0, 900), (1, 100), (2, 500)):
        d = tmp_path / "attempt_0" / str(rank)
        d.mkdir(parents=True)
        (d / "error.json").write_text(json.dumps({"message": {"message": f"ValueError: r{rank}", "extraInfo": {
            "timestamp": "1000", "rank": str(rank + 8), "time_ns": 1000 * 10**9 + ns}}}))
    (tmp_path / "attempt_0" / "3").mkdir()
    (tmp_path / "attempt_0" / "3" / "error.json").write_text("{trunc")  # a rank killed while writing it: skipped
    assert [(f.rank, f.what) for f in failed_ranks(tmp_path, [])] == [(9, "ValueError: r1"), (10, "ValueError: r2"),
                                                                     (8, "ValueError: r0")]


def test_progress_shows_rank_zeros_notes_and_none_of_the_rest_of_the_output():
    """`hw probe --collectives` showed each line torchrun passed on as its progress: a heartbeat on a slow machine
    printed rank 0's traceback above the one-line error (CI, now and then)."""
    shown: list[str] = []
    show = notes_only(shown.append)
    for line in ["[rank 0/2] process group: gloo, a collective waits at most 600 s for its peers",
                 "W1206 19:12:00.123000 4242 torch/distributed/run.py:766] Setting OMP_NUM_THREADS",
                 "[rank0]: Traceback (most recent call last):", '[rank0]:   File "x.py", line 3, in f',
                 "Traceback (most recent call last):", "RuntimeError: injected failure in _op_fn",
                 "[rank 0/2] all_reduce 64 KiB"]:
        show(line)
    assert shown == ["[rank 0/2] process group: gloo, a collective waits at most 600 s for its peers",
                     "[rank 0/2] all_reduce 64 KiB"]
