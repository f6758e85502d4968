"""The per-rank entry point torchrun starts: ``python -m accelkit.distributed.worker JOB.json``.

    init process group (NCCL on GPU, gloo on CPU) → run the job on every rank → gather per-rank results
    to rank 0 → rank 0 stores ONE Measurement (and the planner's Estimate) per variant, rewriting the progress
    document after each → the last barrier → rank 0 writes the document

Jobs: ``bench`` (a training workload under DDP / FSDP2, see ``parallel.py``) and ``collectives`` (see
``collectives.py``). Progress goes to stderr from rank 0 only; stdout stays empty.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, record

from accelkit.bench.metrics import count_flops
from accelkit.bench.record import RankMeasurement
from accelkit.bench.reference import collect, freezing_heap
from accelkit.bench.variants import Variant
from accelkit.bench.workloads import make_workload
from accelkit.bench.workloads.base import run_in, train_step
from accelkit.distributed.agreed_loop import AgreedRun, agreed_steady_state, agreed_warm_up
from accelkit.distributed.collectives import run_collectives
from accelkit.distributed.grad_comm import CommCounter, check_backend
from accelkit.distributed.parallel import model_state_bytes, parallelize, train_parts
from accelkit.distributed.process_group import destroy_process_group
from accelkit.distributed.quality import EVAL_BATCHES, EVAL_STEP, lead_in_steps, mean_over_ranks
from accelkit.distributed.rank import RankContext, gather_to_rank0, start
from accelkit.distributed.rank_results import BenchDocument, open_writer
from accelkit.timing import LoopConfig


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def peak_memory(device: str) -> tuple[int, str]:
    """(bytes, what they are): the allocator's peak on a GPU; the process's peak RSS on a CPU."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.max_memory_allocated(device)), "torch.cuda.max_memory_allocated (this rank's GPU)"
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, \
        "peak resident set size of this rank's process (ru_maxrss; includes the Python runtime and torch)"


# ---- the bench job -----------------------------------------------------------------------------------------
def bench_variant(ctx: RankContext, workload: Any, variant: Any, job: dict[str, Any]) -> RankMeasurement:
    """This rank's measurements of one variant (the timing loop agreed with the other ranks); with gradient
    compression in the run, the bytes of every gradient collective counted per step (grad_comm.py)."""
    loop = LoopConfig.from_dict(job["loop"])
    recipe = variant.recipe(training=True)
    counter = CommCounter() if job.get("grad_comm") else None
    ctx.say(f"{variant.name}: load (build, {job['layout']})")
    t0 = time.perf_counter()
    check_backend(recipe, ctx.backend)
    parts = train_parts(workload, variant, ctx.device, seed=job["seed"], rank=ctx.rank)
    model = parallelize(parts.model, zero=job["zero"], device=ctx.device, recipe=recipe, counter=counter)
    optimizer = parts.make_optimizer(model.parameters())
    step = train_step(model, optimizer, lambda: parts.loss(model), variant, ctx.device)
    if counter is not None:
        step = counter.step(step)
    load_s = time.perf_counter() - t0
    ctx.say(f"{variant.name}: first call")
    t0 = time.perf_counter()
    step()
    sync(ctx.device)
    first_call_s = time.perf_counter() - t0
    flops_per_call = count_flops(step)  # an extra, untimed step (before warm-up); this rank's model FLOPs
    state = getattr(model, "powersgd_state", None)
    if state is not None and state.iter < state.start_powerSGD_iter:  # plain all-reduce until then: not timed
        ctx.say(f"{variant.name}: {state.start_powerSGD_iter - state.iter} untimed step(s) to start_powerSGD_iter")
        while state.iter < state.start_powerSGD_iter:
            step()
    counted_from = len(counter.steps) if counter is not None else 0
    run = AgreedRun()
    ctx.say(f"{variant.name}: warm-up")
    agreed_warm_up(step, loop, device=ctx.device, run=run)
    ctx.say(f"{variant.name}: steady state")
    agreed_steady_state(step, loop, device=ctx.device, run=run,
                        on_block=lambda r: ctx.say(f"{variant.name}: {len(r.samples_s)} it, {r.measured_s:.1f} s"))
    sync(ctx.device)
    states = model_state_bytes(model, optimizer)
    peak, peak_scope = peak_memory(ctx.device)
    items, unit = parts.items, parts.unit
    analytic = (parts.analytic_flops_per_item, parts.analytic_formula)
    recipe_notes = parts.recipe_notes
    step = optimizer = model = parts = None  # type: ignore[assignment]  # free before the next variant
    collect(idle=True)  # the next variant is built without this one beside it
    return RankMeasurement(
        rank=ctx.rank, local_rank=ctx.local_rank, host=ctx.host, device=ctx.device, items=items, unit=unit,
        analytic_flops_per_item=analytic[0], analytic_formula=analytic[1], load_s=load_s, first_call_s=first_call_s,
        flops_per_call=flops_per_call, warmup_iterations=run.warmup_iterations, warmup_s=run.warmup_s,
        samples_s=run.samples_s, block_walls_s=run.block_walls_s, agreed_walls_s=run.agreed_walls_s,
        memory_bytes={**states, "model_states": sum(states.values()), "peak": peak}, peak_scope=peak_scope,
        recipe_notes=recipe_notes, grad_comm=counter.summary(skip=counted_from) if counter is not None else None)


def quality_losses(ctx: Any, workload: Any, variant: Any, job: dict[str, Any], steps: int,
                   lead_in: int = 0) -> dict[str, Any]:
    """This rank's loss at each of ``steps`` training steps of ``variant`` on the task's batches (fresh model from
    the job's seed, fresh optimizer, fresh compression state), after ``lead_in`` steps whose losses are not kept
    (``lead_in_steps``), and then its mean loss on its evaluation batches (``EVAL_BATCHES`` batches of this rank
    that no training step drew, the same for every variant)."""
    import torch

    torch.manual_seed(job["seed"])
    parts = train_parts(workload, variant, ctx.device, seed=job["seed"], rank=ctx.rank)
    model = parallelize(parts.model, zero=job["zero"], device=ctx.device, recipe=variant.recipe(training=True))
    optimizer = parts.make_optimizer(model.parameters())
    batch: list[Any] = [None]
    step = train_step(model, optimizer, lambda: parts.loss_on(model, batch[0]), variant, ctx.device)
    losses = []
    for k in range(lead_in + steps):
        batch[0] = parts.quality_batch(k)
        losses.append(float(step().detach()))  # type: ignore[attr-defined]
    losses = losses[lead_in:]
    evaluate = run_in(variant, ctx.device, lambda: [float(parts.loss_on(model, parts.quality_batch(EVAL_STEP - i)))
                                                    for i in range(EVAL_BATCHES)], inference=False)
    with torch.no_grad():  # not inference_mode: FSDP2 and DDP run their forward collectives as in training
        eval_losses: list[float] = evaluate()  # type: ignore[assignment]
    batch[0] = None
    step = optimizer = model = parts = evaluate = None  # type: ignore[assignment]  # the collect below frees them
    collect(idle=True)  # (it ran while these still held the model: DDP's first construction leaves a reference cycle)
    return {"losses": losses, "eval_loss": sum(eval_losses) / len(eval_losses), "lead_in_steps": lead_in}


def _quality(ctx: RankContext, workload: Any, variant: Any, job: dict[str, Any], lead_in: int) -> dict[str, Any] | None:
    """The ranks' mean loss per step of the quality check and their evaluation loss (rank 0; None elsewhere)."""
    ctx.say(f"{variant.name}: quality check, {job['quality_steps']} steps on the task's data"
            + (f" after {lead_in} lead-in step(s) (PowerSGD's start iteration)" if lead_in else ""))
    losses = gather_to_rank0(quality_losses(ctx, workload, variant, job, job["quality_steps"], lead_in))
    return mean_over_ranks(losses) if losses is not None else None


def run_bench(ctx: RankContext, job: dict[str, Any]) -> dict[str, Any] | None:
    """Every variant of ``job`` on every rank; rank 0 stores each variant as soon as its result can be built (after
    its quality check, and its uncompressed twin's) and rewrites the progress document (``job['progress']``) with the
    variants stored so far — what the launcher returns when Ctrl-C stops the launch. Rank 0's whole document (None
    on the other ranks)."""
    import torch

    workload = make_workload(job["workload"], job["config"])
    variants = [Variant.from_dict(v) for v in job["variants"]]
    gated = job.get("quality_steps", 0) > 0 and any(v.compression != "none" for v in variants)
    lead_in = lead_in_steps(variants)  # the same for every variant: a twin trains exactly as many steps
    losses: dict[str, dict[str, Any] | None] = {}
    measured: list[tuple[Any, list[RankMeasurement]]] = []  # rank 0: gathered, not yet in the document
    progress = Path(job["progress"]) if job.get("progress") else None

    def store_ready(document: BenchDocument) -> None:
        """Store the measured variants whose result can be built now, in order, then the progress document."""
        while measured and (not gated or measured[0][0].compression == "none"
                            or measured[0][0].without_compression().name in losses):
            variant, ranks = measured.pop(0)
            with _sigterm_deferred():  # a variant stored is in the progress document
                entry = document.add(variant, ranks, losses if gated else None)
                if progress is not None:
                    write_document(progress, document.to_json())
            ctx.say(f"{variant.name}: finished" + (f", stored as result {entry.result_id}"
                                                   if entry.result_id is not None else ""))

    # freezing_heap: what survives a collection between variants (torch, transformers, the workload's modules, some
    # 400,000 objects) is frozen for the job, so later collections do not walk it again (0.2 s of CPU each on a
    # 2-core VM, a fifth of a rank's CPU in a tune launch of tiny models); handed back when the job ends
    with freezing_heap(), (open_writer(job) if ctx.rank == 0 else contextlib.nullcontext(None)) as writer:
        document = BenchDocument(ctx, workload, job, writer) if writer is not None else None
        for variant in variants:
            torch.manual_seed(job["seed"])
            mine = bench_variant(ctx, workload, variant, job)
            ranks = gather_to_rank0(mine)
            if gated:
                losses[variant.name] = _quality(ctx, workload, variant, job, lead_in)
            if document is not None and ranks is not None:
                measured.append((variant, ranks))
                store_ready(document)
        if gated:  # the uncompressed reference of each compressed variant, where the run did not time it
            for variant in variants:
                reference = variant.without_compression()
                if variant.compression != "none" and reference.name not in losses:
                    losses[reference.name] = _quality(ctx, workload, reference, job, lead_in)
        if document is None:
            return None
        store_ready(document)
        return document.to_json()


def write_document(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as JSON at ``path``, whole or not at all: written beside it, then renamed over it."""
    beside = path.with_name(path.name + ".partial")
    beside.write_text(json.dumps(doc, default=str))
    beside.replace(path)


@contextlib.contextmanager
def _sigterm_deferred() -> Iterator[None]:
    """SIGTERM (torchrun stopping the ranks, e.g. after Ctrl-C in the launcher) waits until the block ends, then
    acts as it would have (by default: the process ends). A Python handler runs in the main thread whichever thread
    the signal reached, so gloo's threads cannot cut the block short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        if received:
            signal.raise_signal(signal.SIGTERM)


# ---- entry point -------------------------------------------------------------------------------------------
class RankErrorHandler(ErrorHandler):
    """torch's error file (``TORCHELASTIC_ERROR_FILE``, which torchrun sets per rank) plus what the launcher needs
    to name the rank that failed first (``rank_failures.py``): the global rank, local rank, host, and the time in
    nanoseconds — torch's timestamp is in whole seconds, and a rank's peers fail in the same second."""

    failed_at_ns: int | None = None  # set by main() when the job raises, before the process group is destroyed

    def record_exception(self, e: BaseException) -> None:
        super().record_exception(e)
        path = self._get_error_file_path()
        if not path:
            return
        data = json.loads(Path(path).read_text())
        data["message"]["extraInfo"].update(
            rank=os.environ.get("RANK"), local_rank=os.environ.get("LOCAL_RANK"), host=socket.gethostname(),
            time_ns=self.failed_at_ns or time.time_ns())
        Path(path).write_text(json.dumps(data))


ERROR_HANDLER = RankErrorHandler()


@partial(record, error_handler=ERROR_HANDLER)
def main(argv: list[str] | None = None) -> None:
    import torch.distributed as dist

    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(argv[0]).read_text())
    ctx = start(job)
    done = False
    try:
        if job["task"] == "bench":
            doc = run_bench(ctx, job)
        elif job["task"] == "collectives":
            doc = run_collectives(ctx, job)
        else:
            raise ValueError(f"unknown job task {job['task']!r}")
        dist.barrier()
        if ctx.rank == 0 and doc is not None:
            # after the job's last collective: the file says every rank finished the job, so the launcher keeps it
            # even when a rank then dies shutting down (a native thread can still abort a process as it exits; see
            # process_group.py for the one this project found and fixed) — unlike the progress document, which only
            # says what rank 0 had stored when it was written; written whole or not at all
            write_document(Path(job["out"]), doc)
        done = True
    except Exception:
        # the time of the failure: destroying the process group (below) is what makes the peers fail, before
        # @record writes this rank's error file
        ERROR_HANDLER.failed_at_ns = time.time_ns()
        raise
    finally:
        if done:  # after gloo's threads have put down the last collective (process_group.py says why)
            destroy_process_group()
        else:  # at once: the peers learn of the failure from it
            dist.destroy_process_group()


def end_process() -> NoReturn:
    """End this rank after its job succeeded: the ``atexit`` handlers run (torch's, logging's), the standard streams
    are flushed, and the process exits 0 without the interpreter's teardown — freeing every module of torch and
    transformers one object at a time, about 1 s of CPU per rank (0.4 s with torch alone) between the job's end and
    torchrun seeing the rank exit, on every rank of every launch. Nothing is left for it to do: rank 0's document
    and the store are written and closed, and the process group is destroyed (``destroy_process_group``). As the
    serving ranks do (``serve/tensor_parallel_worker.py``); a failed job still ends the usual way, with its
    traceback and error file."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
    end_process()
