"""`accelkit tune … --nproc-per-node N`: the gradient compressions of a multi-process training run, measured on
N ranks (``accelkit.distributed``) and each gated on its loss against the uncompressed run.

    none, bf16, fp16, PowerSGD rank 4 and 1 → refuse what this layout cannot run → one torchrun launch (DDP) →
    the quality gate of each compressed variant (evaluation loss within --max-accuracy-drop of none's, after
    --quality-steps steps at the workload's --lr) → Pareto frontier (speed, memory, loss) → the winner and the code
    that registers it

A gate is only as good as the uncompressed run it compares with: when that run barely learned, or its loss rose,
every compression ends "within" the allowance (PowerSGD rank 1 at 40% of none's progress passed at lr 1e-4), so
the check is inconclusive (``accelkit.recipes.grad_compression.inconclusive_reason``): no compressed variant passes, and
the result says which flag to change.

A distributed run measures no fp32 output drift (each rank trains its own batch), so precisions and the other
recipes are tuned on one process (`accelkit tune WORKLOAD`); this searches the communication only.
"""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING, Any

from accelkit.bench.record import StoreWriter
from accelkit.bench.runner import BenchConfig
from accelkit.bench.variants import Variant, device_refusal
from accelkit.core import Recipe, UserError
from accelkit.distributed.bench_launch import run_distributed_bench
from accelkit.distributed.launch import DistConfig
from accelkit.distributed.parallel import SUPPORTED
from accelkit.distributed.quality import QualityConfig
from accelkit.hardware.device import resolve_device
from accelkit.tune.ranking import unsupported
from accelkit.tune.search import Trial, TuneConfig, TuneResult, _dominates, _objective_key, check_measured_budget

if TYPE_CHECKING:
    from accelkit.bench.workloads.base import BenchWorkload
    from accelkit.results import ResultStore

#: (grad_compression, PowerSGD rank) tried, plain first
CANDIDATES: tuple[tuple[str, int], ...] = (("none", 4), ("bf16", 4), ("fp16", 4), ("powersgd", 4), ("powersgd", 1))


def compression_snippet(recipe: Recipe) -> str:
    """Paste-ready code that registers the compression on a DDP model, on any backend: accelkit's
    ``register_ddp_hook``, what the measured run registered (without counting). torch's hooks registered directly do
    not run on gloo, where tune measures on CPUs: DDP refuses a hook named ``bf16_compress_hook`` without CUDA +
    NCCL 2.10 (TypeError), and their ``Future.then`` callbacks run on gloo's worker threads, where PowerSGD with two or
    more buckets (> 1 MiB of gradients) aborts (SIGABRT) and a callback still running at exit aborts the rank;
    ``register_ddp_hook`` completes their collectives on the calling thread there — see
    ``accelkit.distributed.grad_comm``. The plain-torch line follows as a comment, for NCCL."""
    head = ("# ddp_model = torch.nn.parallel.DistributedDataParallel(model, ...)  # after the process group starts\n"
            "# (on gloo: accelkit.distributed.process_group.init_process_group and its destroy_process_group, so that\n"
            "#  the group ends before the interpreter does, without a hang — docs/distributed.md)\n")
    kind = recipe.grad_compression
    if kind == "none":
        return head + "# no compression: keep DDP's built-in all-reduce (register no hook)"
    defaults = Recipe().to_dict()
    shown = {"grad_compression", *(["powersgd_rank"] if kind == "powersgd" else [])}  # and what differs from defaults
    fields = ", ".join(f"{k}={v!r}" for k, v in recipe.to_dict().items()
                       if k in shown or (k.startswith("powersgd_") and defaults[k] != v))
    if kind == "powersgd":
        torch_only = ("torch alone, NCCL only: from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook\n"
                      "#  state = powerSGD_hook.PowerSGDState(process_group=None, "
                      f"matrix_approximation_rank={recipe.powersgd_rank}, start_powerSGD_iter={recipe.powersgd_start_iter}, "
                      f"use_error_feedback={recipe.powersgd_error_feedback}, warm_start={recipe.powersgd_warm_start}, "
                      f"min_compression_rate={recipe.powersgd_min_compression_rate:g}, orthogonalization_epsilon=1e-8)"
                      "\n#  ddp_model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)")
        why = "torch's powerSGD_hook; on gloo its collectives complete on the training thread (see grad_comm)"
    else:
        torch_only = ("torch alone, NCCL only: from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                      f"#  ddp_model.register_comm_hook(None, default_hooks.{kind}_compress_hook)")
        why = f"torch's default_hooks.{kind}_compress_hook, registered so that DDP also takes it on gloo"
    return (head + "from accelkit.core import Recipe\n"
            "from accelkit.distributed.grad_comm import register_ddp_hook\n\n"
            f"# {why}\n# {torch_only}\n"
            f"register_ddp_hook(ddp_model, Recipe({fields}))")


def _gate(entry: dict[str, Any], inconclusive: str | None, *, reference: bool = False) -> dict[str, Any]:
    """The trial's gate from its bench entry; ``inconclusive``: why its uncompressed reference cannot judge it.
    ``reference``: the uncompressed variant, the reference by definition — with no compressed twin measured beside it
    (--max-trials 1) no quality check runs, and it failed "no quality check ran": "No recipe passed the accuracy
    gate", where one process's tune crowns fp32."""
    quality = entry.get("quality") or {}
    if quality.get("role") == "reference" or (reference and "passed" not in quality):
        return {"passed": True, "criterion": "reference", "candidate_value": 1.0}
    if "passed" not in quality:
        return {"passed": False, "criterion": "none", "reason": quality.get("note") or "no quality check ran"}
    message = _in_tune_words(quality.get("message"))
    if inconclusive is not None:
        return {"passed": False, "criterion": "loss vs none", "inconclusive": True, "reason": inconclusive,
                "message": message}
    ratio = quality.get("ratio")
    # the accuracy axis of the Pareto frontier: none's loss ÷ this loss (1 = as good, lower = worse)
    return {"passed": bool(quality["passed"]), "criterion": "loss vs none",
            "candidate_value": 1.0 / ratio if ratio else 0.0, "threshold": 1.0 / quality["threshold"],
            "message": message}


#: the bench's flag for the quality check's allowance (QualityConfig.max_loss_increase), which tune does not take
_BENCH_ALLOWANCE_FLAG = "--" + "max_loss_increase".replace("_", "-")


def _in_tune_words(message: str | None) -> str | None:
    """The bench's gate message as tune says it: the bench names its allowance by its own flag (an inconclusive
    gate's "5 × <that flag> 0.01"), which tune does not take; tune's --max-accuracy-drop is that allowance."""
    pattern = rf"(?<![\w-]){re.escape(_BENCH_ALLOWANCE_FLAG)}(?![\w-])"
    return None if message is None else re.sub(pattern, "--max-accuracy-drop", message)


def tune_compression(workload: BenchWorkload, config: TuneConfig | None = None, *, nproc_per_node: int,
                     quality_steps: int | None = None, collective_timeout_s: float | None = None,
                     store: ResultStore | None = None, reporter: Any = None) -> TuneResult:
    """Search the gradient compressions of ``workload``'s training step on ``nproc_per_node`` ranks (DDP).
    ``quality_steps``: training steps of the quality check (``QualityConfig``'s field; None: its default); it trains
    at the workload's learning rate (``lr`` of its config). ``collective_timeout_s``: how long a rank waits in one
    collective for its peers (``DistConfig``'s field, checked there; None: its default)."""
    config = config or TuneConfig()
    _check_arguments(workload, nproc_per_node, quality_steps)
    quality = QualityConfig(max_loss_increase=config.max_accuracy_drop,
                            **({} if quality_steps is None else {"quality_steps": quality_steps}))
    layout = DistConfig(nproc_per_node=nproc_per_node, collective_timeout_s=collective_timeout_s)
    device = resolve_device(config.device)
    trials, measured = _candidates(device, nproc_per_node, config.max_trials)
    bench = BenchConfig(device=device, loop=config.measurement_loop, save=store is not None)
    run_id = uuid.uuid4().hex[:12]
    run = run_distributed_bench(workload, [v for _, v in measured], bench, layout,
                                store=store, reporter=reporter, run_id=run_id,
                                quality=quality)
    doc = run.to_json()
    entries = {e["name"]: e for e in doc["variants"]}
    inconclusive = _inconclusive_references(entries, config, lr=getattr(workload.config, "lr", None))
    _record_measured(measured, entries, inconclusive, interrupted=run.interrupted)
    # no planner estimate here: --memory-budget holds each variant to its measured peak (per rank)
    check_measured_budget([t for t, _ in measured], config.memory_budget_bytes)
    passing = [t for t in trials if t.passed and t.status == "measured"]  # over-budget: passed, not ranked
    if inconclusive:  # the reference passes only by definition: crowning it would claim a check that did not happen
        passing = [t for t in passing if t.name not in inconclusive]
    for t in passing:
        t.pareto = not any(_dominates(o, t) for o in passing if o is not t)
    winner = min(passing, key=lambda t: _objective_key(t, config.objective)) if passing else None
    notes = [f"gradient compression on {nproc_per_node} ranks (DDP); each compressed variant is gated on its "
             f"evaluation loss within {config.max_accuracy_drop:.0%} of none's (--max-accuracy-drop)",
             *(f"no winner: the quality check is inconclusive — {why}" for why in dict.fromkeys(inconclusive.values())),
             *run.notes]
    result = TuneResult(workload=workload.label, objective=config.objective, device=device, trials=trials,
                        winner=winner, snippet=compression_snippet(winner.recipe) if winner else None, run_id=run_id,
                        notes=notes,
                        winner_unsupported=unsupported(winner, passing, config.objective) if winner else None)
    result.record_run(doc)
    result.store_summary(StoreWriter(store),
                         name=f"tune {workload.label} gradient compression ×{nproc_per_node} ({config.objective})",
                         hardware=run.hardware, details={"config": config.to_dict(), "nproc_per_node": nproc_per_node},
                         run_id=run_id)
    return result


def _check_arguments(workload: BenchWorkload, nproc_per_node: int, quality_steps: int | None) -> None:
    """What the search cannot run with: a workload the launcher does not train, one rank, no quality steps."""
    if workload.task != "train" or workload.name not in SUPPORTED:
        raise UserError(f"--nproc-per-node tunes the gradient compression of a training workload ({', '.join(SUPPORTED)}); "
                        f"{workload.name} is not one — drop --nproc-per-node")
    if nproc_per_node < 2:
        raise UserError("--nproc-per-node must be 2 or more to tune gradient compression")
    if quality_steps is not None and quality_steps < 1:
        raise UserError(f"--quality-steps {quality_steps}: tune picks a compression by its quality check; give 1 or more")


def _candidates(device: str, nproc_per_node: int, max_trials: int) -> tuple[list[Trial], list[tuple[Trial, Variant]]]:
    """Every candidate's trial (refused: what this layout cannot run; skipped: beyond --max-trials), and the
    (trial, variant) pairs to measure."""
    variants = [Variant(grad_compression=kind, **({"powersgd_rank": rank} if kind == "powersgd" else {}))  # type: ignore[arg-type]
                for kind, rank in CANDIDATES]
    trials = [Trial(v.name, v.recipe(training=True)) for v in variants]
    for t, v in zip(trials, variants, strict=True):
        reason = device_refusal(v, device, training=True, world_size=nproc_per_node)
        if reason:
            t.status, t.reason = "refused", reason
    measured = [(t, v) for t, v in zip(trials, variants, strict=True) if t.status == "pending"][:max_trials]
    for t in trials:
        if t.status == "pending" and all(t is not m for m, _ in measured):
            t.status, t.reason = "skipped", f"beyond --max-trials {max_trials}"
    return trials, measured


def _inconclusive_references(entries: dict[str, dict[str, Any]], config: TuneConfig, *,
                             lr: float | None) -> dict[str, str]:
    """Reference name → why it cannot judge its compressed twins (it barely learned, or its loss rose)."""
    # lazy: recipes import torch
    from accelkit.recipes.grad_compression import inconclusive_reason

    inconclusive: dict[str, str] = {}
    for name, entry in entries.items():
        if (entry.get("quality") or {}).get("role") == "reference":
            why = inconclusive_reason(entry["quality"], config.max_accuracy_drop, allowance_flag="--max-accuracy-drop")
            if why is not None:
                inconclusive[name] = why + (f" (this check trained at --lr {lr:g})" if lr is not None else "")
    return inconclusive


def _record_measured(measured: list[tuple[Trial, Variant]], entries: dict[str, dict[str, Any]],
                     inconclusive: dict[str, str], *, interrupted: bool) -> None:
    """Each measured trial's figures and quality gate from its bench entry (no entry: interrupted, or failed)."""
    for t, v in measured:
        entry = entries.get(t.name)
        if entry is None:
            t.status, t.reason = ("interrupted", "not measured (interrupted)") if interrupted else ("failed", "not measured")
            continue
        t.status = "measured"
        t.throughput, t.unit = entry["throughput"]["value"], entry["throughput"]["unit"]
        t.latency_s = entry["latency_s"]["median"]
        t.memory_bytes = t.measured_peak_bytes = entry["memory_bytes"].get("peak")
        t.memory_basis = "measured peak"
        t.accuracy = {"grad_comm": entry.get("grad_comm"), "quality": entry.get("quality")}
        t.gate = _gate(entry, inconclusive.get(v.without_compression().name), reference=v.compression == "none")
        t.passed = bool(t.gate["passed"])
        if t.gate.get("inconclusive"):
            t.reason = "inconclusive: its uncompressed reference cannot judge it (the gate's reason, and the notes)"
        elif not t.passed:  # the loss against none's and the allowance it missed, or why no check ran
            t.reason = t.gate.get("message") or f"quality gate: {t.gate.get('reason')}"
