"""`accelkit hw probe --collectives --nproc-per-node N`: all-reduce, all-gather and reduce-scatter over
message sizes on torch.distributed (NCCL on GPUs, gloo on CPUs), with the nccl-tests definitions
(github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md):

* size S: all-reduce — the buffer each rank holds; all-gather — the gathered (output) buffer;
  reduce-scatter — the input buffer (n × each rank's output). Time t: per iteration, the slowest rank.
* algorithm bandwidth  algbw = S / t
* bus bandwidth        busbw = algbw · 2(n−1)/n   (all-reduce)
                       busbw = algbw ·  (n−1)/n   (all-gather, reduce-scatter)

busbw is comparable with the link bandwidth whatever n is (a ring moves that much per link), which is
why the planner's collective model (``plan/comm.py``) takes it in place of ``link × efficiency``: the
all-reduce busbw at the largest message is stored as ``details['bus_bandwidth_gbps']`` and picked up by
``plan/calibrate.py`` when planning on the same hardware. GB = 10^9 bytes.

The arithmetic here imports no torch; ``run_collectives`` is what each rank runs under ``worker.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from accelkit.bench.runner import identify
from accelkit.core import Measurement, UserError, summarize
from accelkit.core.spec import Spec, spec_field
from accelkit.distributed.agreed_loop import agreed_loop
from accelkit.distributed.launch import check_processes, launch
from accelkit.distributed.rank import RankContext, gather_to_rank0
from accelkit.distributed.rank_results import open_writer
from accelkit.hardware.detect import environment
from accelkit.hardware.device import resolve_device
from accelkit.timing import LoopConfig

if TYPE_CHECKING:
    from accelkit.distributed.launch import DistConfig
    from accelkit.results import ResultStore

Op = Literal["all_reduce", "all_gather", "reduce_scatter"]
OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
DEFINITIONS = {
    "size": "nccl-tests: all_reduce = buffer per rank; all_gather = gathered output; reduce_scatter = input (n × output)",
    "time": "per iteration, the slowest rank (perf_counter_ns on CPU, CUDA events on GPU); median over iterations",
    "algbw": "S / t",
    "busbw": "all_reduce: algbw · 2(n−1)/n; all_gather, reduce_scatter: algbw · (n−1)/n (nccl-tests PERFORMANCE.md)",
    "units": "GB/s with GB = 10^9 bytes",
}
KiB, MiB = 1 << 10, 1 << 20
CPU_SIZES = tuple(KiB << (2 * i) for i in range(9))  # 1 KiB … 64 MiB, ×4
GPU_SIZES = tuple(MiB << (2 * i) for i in range(6))  # 1 MiB … 1 GiB, ×4
#: the largest message ``max_size_bytes`` takes: the default range's end on a GPU
MAX_MESSAGE_BYTES = GPU_SIZES[-1]


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (nccl-tests)."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    raise ValueError(f"op={op!r} is not valid; expected one of {', '.join(OPS)}")


def algorithm_bandwidth(size_bytes: float, seconds: float) -> float:
    """algbw in bytes/s."""
    return size_bytes / seconds


def bus_bandwidth(op: str, size_bytes: float, seconds: float, n: int) -> float:
    """busbw in bytes/s."""
    return algorithm_bandwidth(size_bytes, seconds) * bus_factor(op, n)


def message_elements(size_bytes: int, n: int, element_bytes: int = 4) -> int:
    """Elements of the S-byte buffer, rounded down to a multiple of n (gather/scatter split it evenly)."""
    return max(n, size_bytes // element_bytes // n * n)


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveConfig(Spec):
    """What the collective probe measures."""

    ops: tuple[Op, ...] = spec_field(("all_reduce", "all_gather", "reduce_scatter"), doc="Collectives to time.")
    sizes_bytes: tuple[int, ...] | None = spec_field(
        None, doc="Message sizes S in bytes (nccl-tests meaning); None: 1 KiB–64 MiB on CPU, 1 MiB–1 GiB on GPU, ×4.")
    max_size_bytes: int | None = spec_field(
        None, min=4, max=MAX_MESSAGE_BYTES,
        doc="The largest message: the default sizes up to it (below the first one, it alone); None: all of them.")
    quick: bool = spec_field(False, doc="Short loops per size (a smoke run; percentiles not backed).")
    device: str = spec_field("auto", doc="auto (each rank's GPU, else CPU) or cpu.")

    def validate(self) -> None:
        if not self.ops:
            raise ValueError("ops is empty; give at least one of " + ", ".join(OPS))
        for i, s in enumerate(self.sizes_bytes or ()):
            if s < 4:
                raise ValueError(f"sizes_bytes[{i}]={s} is out of range; expected >= 4 bytes")
        if self.sizes_bytes is not None and self.max_size_bytes is not None:
            raise ValueError("max_size_bytes bounds the default sizes; with sizes_bytes given, drop it")

    def message_sizes(self, device: str) -> tuple[int, ...]:
        """The sizes S a rank on ``device`` measures, smallest first."""
        if self.sizes_bytes:
            return self.sizes_bytes
        sizes = GPU_SIZES if device.startswith("cuda") else CPU_SIZES
        if self.max_size_bytes is None:
            return sizes
        return tuple(s for s in sizes if s <= self.max_size_bytes) or (self.max_size_bytes,)

    def loop(self) -> Any:
        if self.quick:
            return LoopConfig(warmup_iterations=2, warmup_time_s=0.0, min_iterations=5, min_time_s=0.05)
        return LoopConfig(warmup_iterations=5, warmup_time_s=0.2, min_iterations=20, min_time_s=0.5)


def headline(results: list[dict[str, Any]], op: str = "all_reduce") -> dict[str, Any] | None:
    """The figure the planner takes: ``op``'s bus bandwidth at the largest message measured."""
    rows = [r for r in results if r["op"] == op]
    return max(rows, key=lambda r: r["size_bytes"]) if rows else None


# ---- per rank (inside torchrun) ----------------------------------------------------------------------------
def _op_fn(op: str, size_bytes: int, n: int, device: str) -> tuple[Callable[[], object], int]:
    """The collective on fresh buffers, and the S it moves (bytes, nccl-tests meaning)."""
    import torch
    import torch.distributed as dist

    elements = message_elements(size_bytes, n)
    if op == "all_reduce":
        buf = torch.ones(elements, device=device)
        return (lambda: dist.all_reduce(buf)), elements * 4
    if op == "all_gather":
        chunk = torch.ones(elements // n, device=device)
        out = torch.empty(elements, device=device)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return (lambda: gather(out, chunk)), elements * 4
    inp = torch.ones(elements, device=device)
    out = torch.empty(elements // n, device=device)
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return (lambda: scatter(out, inp)), elements * 4


def run_collectives(ctx: RankContext, job: dict[str, Any]) -> dict[str, Any] | None:
    """Every rank times every (op, size) with the agreed loop; rank 0 builds and stores the Measurement (a write the
    store refuses is ``store_error`` in the document, which keeps the measurement)."""
    config = CollectiveConfig.from_dict(job["collectives"])
    loop = config.loop()
    n = ctx.world_size
    sizes = config.message_sizes(ctx.device)
    mine: dict[str, list[float]] = {}
    moved: dict[str, int] = {}
    for op in config.ops:
        for size in sizes:
            fn, s = _op_fn(op, size, n, ctx.device)
            ctx.say(f"{op} {s} bytes")
            run = agreed_loop(fn, loop, device=ctx.device)
            key = f"{op}@{s}"
            mine[key], moved[key] = run.samples_s, s
    gathered = gather_to_rank0(mine)
    if gathered is None:
        return None
    results, samples = [], {}
    for key, s in moved.items():
        op_name = key.split("@")[0]
        slowest = [max(xs) for xs in zip(*(g[key] for g in gathered), strict=True)]
        stats = summarize(slowest)
        algbw = algorithm_bandwidth(s, stats.median)
        results.append({"op": op_name, "size_bytes": s, "time_s": stats.median, "algbw_gbps": algbw / 1e9,
                        "busbw_gbps": algbw * bus_factor(op_name, n) / 1e9, "iterations": stats.n, "cv": stats.cv})
        samples[f"{key}_s"] = slowest
    return _store(ctx, job, config, results, samples)


def _store(ctx: RankContext, job: dict[str, Any], config: CollectiveConfig, results: list[dict[str, Any]],
           samples: dict[str, list[float]]) -> dict[str, Any]:
    hardware, catalog = identify(ctx.device)
    top = headline(results)
    busbw = {op: h["busbw_gbps"] for op in config.ops if (h := headline(results, op))}
    m = Measurement(
        kind="collectives", name=f"collectives {ctx.backend} {ctx.world_size}×{hardware}", hardware=hardware,
        num_devices=ctx.world_size, throughput=top["busbw_gbps"] if top else None,
        throughput_unit="GB/s all-reduce bus bandwidth (largest message)",
        details={"device": "cpu" if ctx.device == "cpu" else "cuda", "catalog_name": catalog, "backend": ctx.backend,
                 "world_size": ctx.world_size, "num_nodes": ctx.num_nodes, "nproc_per_node": ctx.local_world_size,
                 "bus_bandwidth_gbps": busbw, "largest_size_bytes": max(r["size_bytes"] for r in results),
                 "definitions": DEFINITIONS, "quick": config.quick, "results": results,
                 "hosts": sorted({ctx.host})},
        environment={**environment(with_torch=True), "distributed": {"backend": ctx.backend, "launcher": "torchrun"}},
        samples=samples,
    )
    # a store that refuses the row (disk full, a lock held past its timeout) must not lose the measurement with
    # rank 0's exception: the document keeps it, store_error says why, and the CLI prints it (exit 1)
    with open_writer(job) as writer:
        result_id = writer.add(m, run_id=job["run_id"])
    return {**m.to_dict(), "result_id": result_id, **({"store_error": writer.error} if writer.error else {})}


# ---- the launching side ------------------------------------------------------------------------------------
def probe_collectives(config: CollectiveConfig, dist: DistConfig, *, store: ResultStore | None = None,
                      save: bool = True, on_line: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """Launch the probe on ``dist.nproc_per_node`` ranks per node; rank 0 stores it (when ``save``).
    Returns the Measurement as a dict plus ``result_id`` (None on a node that did not host rank 0), and
    ``warnings`` when a rank failed after every rank had finished (``LaunchResult.teardown_error``)."""
    if dist.nproc_per_node * dist.nnodes_range[0] < 2:
        raise UserError("a collective needs at least 2 ranks; give --nproc-per-node 2 or more")
    # the smallest message the ranks split evenly is one fp32 element each (message_elements): below it, the probe
    # measured that larger size (`--max-message-size 4` on 2 ranks ran 8-byte messages; found in a hunt)
    world = dist.nproc_per_node * dist.nnodes_range[1]
    if config.max_size_bytes is not None and config.max_size_bytes < 4 * world:
        raise UserError(f"--max-message-size {config.max_size_bytes}B is below {4 * world} B, the smallest message "
                        f"{world} ranks split evenly (one 4-byte element each); give {4 * world}B or more")
    # as the bench refuses it: more CPU ranks than cores measured the oversubscription, and stored it as this
    # host's bus bandwidth for the planner (found in review)
    check_processes(dist.nproc_per_node, "cpu" if config.device == "cpu" else resolve_device(config.device))
    job = {"task": "collectives", "device": config.device, "backend": dist.backend, "run_id": uuid.uuid4().hex[:12],
           "save": save, "store_path": str(store.path) if store is not None else None,
           "collectives": config.to_dict()}
    result = launch(job, dist, on_line=on_line)
    if result.document is not None and result.teardown_error is not None:
        result.document["warnings"] = [*result.document.get("warnings", []), result.teardown_error]
    return result.document
