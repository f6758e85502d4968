"""`accelkit tune`: find the fastest (or leanest) recipe for a workload that keeps accuracy.

    enumerate the recipes that make sense for the workload → refuse what this device cannot run →
    prune by the planner's memory estimate (--memory-budget) → keep --max-trials → measure the rest with
    the bench runner, interleaved → gate accuracy against fp32 → Pareto frontier → winner + snippet

Every candidate ends in one status (``TRIAL_STATUSES``): measured (passed or failed the gate), refused (with the
reason), pruned (the planner's estimate is over --memory-budget: not measured), over-budget (measured, and its
measured peak is over --memory-budget: not ranked), skipped (beyond --max-trials), failed (an error while measuring:
the phase and the error) or interrupted (Ctrl-C stopped the search before it was measured).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from accelkit.bench.record import StoreWriter
from accelkit.bench.runner import BenchConfig, identify, predict_variant, run_benchmark
from accelkit.bench.variants import Variant, device_refusal
from accelkit.core import Measurement, Recipe, UserError
from accelkit.core.spec import Spec, spec_field
from accelkit.hardware.detect import environment
from accelkit.hardware.device import resolve_device
from accelkit.hardware.probe import CPU_DEFAULT_DTYPES, ProbeConfig, probe, quick_probe_min_time, supported_dtypes
from accelkit.results.store import UNSTORED_KEY, unstored_record
from accelkit.timing import LoopConfig
from accelkit.tune.ranking import dominates, speed, speed_order, unsupported

if TYPE_CHECKING:
    from accelkit.bench.workloads.base import BenchWorkload
    from accelkit.core.bench_result import BenchRunResult
    from accelkit.results import ResultStore

Objective = Literal["throughput", "latency", "memory"]
TrialStatus = Literal["pending", "measured", "refused", "pruned", "over-budget", "skipped", "failed", "interrupted"]
#: what each trial ends as (``pending`` only while the search runs); the module docstring says what each means
TRIAL_STATUSES: tuple[TrialStatus, ...] = ("measured", "refused", "pruned", "over-budget", "skipped", "failed",
                                           "interrupted")


#: tune's short measurement loop (``TuneConfig.quick``, the default): a few seconds per recipe
QUICK_LOOP = LoopConfig(warmup_iterations=3, warmup_time_s=0.5, min_iterations=10, min_time_s=1.5)


@dataclass(frozen=True, slots=True, kw_only=True)
class TuneConfig(Spec):
    """What `tune` optimizes and within which limits."""

    objective: Objective = spec_field("throughput", doc="throughput (max items/s), latency (min median), memory (min peak).")
    max_accuracy_drop: float = spec_field(0.01, min=0.0, max=1.0, doc="Gate: allowed relative drop (0.01 = within 1%).")
    memory_budget_bytes: int | None = spec_field(None, min=1, doc="Prune recipes whose planner estimate exceeds this.")
    max_trials: int = spec_field(8, min=1, doc="Most recipes measured (the fp32 baseline included).")
    device: str = spec_field("auto", doc="auto, cpu or cuda[:N].")
    quick: bool = spec_field(True, doc="Short measurement loops (seconds per recipe); False = the bench defaults.")
    compile: bool = spec_field(True, doc="Include torch.compile recipes (each costs a compilation).")
    loop: LoopConfig | None = spec_field(
        None, doc="Each trial's measurement loop; None: QUICK_LOOP with quick, else the bench's defaults.")

    @property
    def measurement_loop(self) -> LoopConfig:
        """The loop every trial is measured with: ``loop`` when given, else ``quick``'s short one or the bench's."""
        if self.loop is not None:
            return self.loop
        return QUICK_LOOP if self.quick else LoopConfig()


@dataclass(slots=True)
class Trial:
    """One candidate recipe and what became of it."""

    name: str
    recipe: Recipe
    status: TrialStatus = "pending"  # one of TRIAL_STATUSES once the search is done
    reason: str | None = None
    estimated_bytes: int | None = None
    throughput: float | None = None
    unit: str | None = None
    latency_s: float | None = None
    memory_bytes: int | None = None
    memory_basis: str | None = None  # "planner estimate" or "measured peak"
    accuracy: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None
    passed: bool = False
    pareto: bool = False
    result_ids: list[int] = field(default_factory=list)  # its stored bench rows (none: not saving, or refused)
    #: the bench's interleaved comparison with the baseline (ratio: median over pairs of blocks, p25/p75, pairs)
    vs_baseline: dict[str, Any] | None = None
    #: what the speed objective and the Pareto frontier rank: the paired ratio when every trial has one from the
    #: same interleaved run (the bench's own verdict reads it), else None and ``throughput`` (total items ÷ time)
    ranked_speed: float | None = None
    #: the bench's measured peak (``memory_bytes`` may show the planner's estimate instead): what the budget checks
    measured_peak_bytes: int | None = None
    #: the step of the workload the figures above are of (llm: decode), and every step's own figures (llm: prefill
    #: and decode) — the run's document listed both, and keeping one entry per recipe name dropped prefill unseen
    step: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "recipe": self.recipe.to_dict(), "status": self.status, "reason": self.reason,
            "estimated_bytes": self.estimated_bytes, "throughput": self.throughput, "unit": self.unit,
            "latency_s": self.latency_s, "memory_bytes": self.memory_bytes, "memory_basis": self.memory_basis, "accuracy": self.accuracy,
            "gate": self.gate, "passed": self.passed, "pareto": self.pareto, "result_ids": self.result_ids,
            "vs_baseline": self.vs_baseline, "step": self.step, "steps": self.steps,
        }


@dataclass(slots=True)
class TuneResult:
    workload: str
    objective: str
    device: str
    trials: list[Trial]
    winner: Trial | None
    snippet: str | None
    run_id: str
    #: why the table does not support starring the winner (a runner-up within the noise, a table column that ranks
    #: another first); None when it does (``accelkit.tune.ranking.unsupported``)
    winner_unsupported: str | None = None
    notes: list[str] = field(default_factory=list)
    result_id: int | None = None  # the summary row
    interrupted: bool = False  # Ctrl-C stopped the measuring: ``unfinished`` names the recipes it cut short
    stopped_by: str | None = None  # the signal that stopped the measuring, SIGINT or SIGTERM (the CLI exits 130/143)
    unfinished: list[str] = field(default_factory=list)
    ran_quick_probe: bool = False  # no probe of this CPU was stored, so the search ran a quick one …
    quick_probe_id: int | None = None  # … stored as this row (None: the store did not take it)
    #: why the store refused a write: the trials without result_ids, and the summary, are not stored (nothing later
    #: was tried); every measured trial is in the result all the same
    store_error: str | None = None
    #: the step speed and latency are ranked on when the workload measures several per recipe (llm: decode)
    ranked_step: str | None = None
    #: with store_error: what was not stored (the quick probe, the trials' rows, the summary), as exported records —
    #: the printed document goes back into a store with `accelkit results import`
    unstored_results: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "objective": self.objective, "device": self.device, "run_id": self.run_id,
            "ranked_step": self.ranked_step,
            "winner": self.winner.to_json() if self.winner else None, "snippet": self.snippet,
            "winner_firm": self.winner is not None and self.winner_unsupported is None,
            "winner_unsupported": self.winner_unsupported,
            "pareto": [t.name for t in self.trials if t.pareto], "trials": [t.to_json() for t in self.trials],
            "notes": self.notes, "result_id": self.result_id, "interrupted": self.interrupted,
            "unfinished": self.unfinished,
            "quick_probe": {"result_id": self.quick_probe_id} if self.ran_quick_probe else None,
            **({"store_error": self.store_error} if self.store_error is not None else {}),
            **({UNSTORED_KEY: self.unstored_results} if self.unstored_results else {}),
        }

    def record_run(self, doc: dict[str, Any]) -> None:
        """What the bench run behind the trials says about storing and Ctrl-C: each trial's stored rows (every step
        of its variant), whether it was interrupted and which recipes it did not finish."""
        for t in self.trials:
            t.result_ids = [e["result_id"] for e in doc["variants"] if e["name"] == t.name and e["result_id"] is not None]
        self.interrupted, self.unfinished = bool(doc.get("interrupted")), list(doc.get("unfinished") or [])
        self.stopped_by = doc.get("stopped_by")
        self.store_error = self.store_error or doc.get("store_error")
        self.unstored_results += doc.get(UNSTORED_KEY) or []

    def store_summary(self, writer: StoreWriter, *, name: str, hardware: str, details: dict[str, Any],
                      run_id: str) -> None:
        """Store the search's own row (kind ``tune``: the winner's throughput, this result and ``details``) unless
        the store already refused a row of this run — a refused summary stays in the result, not lost."""
        if writer.store is None and writer.error is None:  # not saving
            return
        winner = self.winner
        own = {k: v for k, v in self.to_json().items() if k != UNSTORED_KEY}
        summary = Measurement(
            kind="tune", name=name, hardware=hardware, throughput=winner.throughput if winner else None,
            throughput_unit=winner.unit if winner else None, details={**own, **details},
            environment=environment(with_torch=True))
        if self.store_error is None:  # (after a refused write of this run no later one is tried)
            self.result_id = writer.add(summary, run_id=run_id)
            self.store_error = writer.error
        if self.result_id is None:  # refused: the row is kept
            self.unstored_results.append(unstored_record(summary, run_id))


def candidate_recipes(workload: BenchWorkload, *, compile: bool = True, cuda: bool = False) -> list[tuple[str, Recipe]]:
    """The recipes worth trying for this kind of workload, fp32 first, most promising next. ``cuda``: the
    int4 candidate runs on a bf16 model there (tinygemm's kernels pack bf16 weights only)."""
    if workload.task == "train":
        out = [
            ("fp32", Recipe()), ("bf16", Recipe(precision="bf16")), ("fp16", Recipe(precision="fp16")),
            ("fp8", Recipe(precision="fp8")), ("tf32", Recipe(precision="tf32")),
            ("bf16+recompute=selective", Recipe(precision="bf16", recompute="selective")),
            ("recompute=full", Recipe(recompute="full")),
        ]
        if workload.is_cnn:  # Conv-BN folding is for inference: a training CNN gets the layout only
            out[2:2] = [("bf16+channels_last", Recipe(precision="bf16", channels_last=True)),
                        ("channels_last", Recipe(channels_last=True))]
        if compile:
            out += [("bf16+compile", Recipe(precision="bf16", compile="default")), ("compile", Recipe(compile="default"))]
        return out
    out = [
        ("fp32", Recipe()), ("bf16", Recipe(precision="bf16")), ("int8-dynamic", Recipe(quantization="int8-dynamic")),
        ("fp16", Recipe(precision="fp16")), ("fp8-dynamic", Recipe(precision="bf16", quantization="fp8-dynamic")),
        ("tf32", Recipe(precision="tf32")), ("int8-weight", Recipe(quantization="int8-weight")),
        ("bf16+int4-weight", Recipe(precision="bf16", quantization="int4-weight")) if cuda
        else ("int4-weight", Recipe(quantization="int4-weight")),
        ("bf16+2:4", Recipe(precision="bf16", sparsity="2:4")),
    ]
    if workload.is_cnn:
        out[1:1] = [("bf16+channels_last+fold_bn", Recipe(precision="bf16", channels_last=True, fold_bn=True)),
                    ("channels_last+fold_bn", Recipe(channels_last=True, fold_bn=True))]
    if compile:
        out += [("bf16+compile", Recipe(precision="bf16", compile="default")), ("compile", Recipe(compile="default"))]
    return out


def over_budget(kind: str, value_bytes: int, budget_bytes: int) -> str:
    """'<kind> 2050.31 MiB > budget 2050.28 MiB': each figure in MiB (KiB or bytes below 1 MiB: a 1 KiB budget is no
    '0.0 MiB'), with as many decimals as it takes for the two to differ (at one decimal both read 2050.3), in exact
    bytes when even three do not tell them apart."""
    def size(num_bytes: int, decimals: int) -> str:
        if num_bytes < 2**10:
            return f"{num_bytes} B"
        return f"{num_bytes / 2**10:.{decimals}f} KiB" if num_bytes < 2**20 else f"{num_bytes / 2**20:.{decimals}f} MiB"

    for decimals in (1, 2, 3):
        shown, limit = size(value_bytes, decimals), size(budget_bytes, decimals)
        if shown != limit:
            return f"{kind} {shown} > budget {limit}"
    return f"{kind} {value_bytes:,} B > budget {budget_bytes:,} B"


def check_measured_budget(trials: list[Trial], budget_bytes: int | None) -> None:
    """Mark each measured trial whose measured peak is over ``budget_bytes`` ``over-budget`` (not ranked), with both
    figures. The planner's estimate prunes before measuring; this catches what it had no estimate for (measured
    instead of pruned) and what it underestimated. On a CPU the peak is the RSS the recipe added (load + the
    step's peak increase; the runtime not included), so a recipe over the budget by it is over it in fact."""
    if budget_bytes is None:
        return
    for t in trials:
        peak = t.measured_peak_bytes
        if t.status == "measured" and peak is not None and peak > budget_bytes:
            t.status = "over-budget"  # a gate failure's reason follows: both say why it is not ranked
            t.reason = over_budget("measured peak", peak, budget_bytes) + (f"; {t.reason}" if t.reason else "")


def _speed(trial: Trial) -> float:
    return speed(trial)


def rank_by_paired_ratios(trials: list[Trial]) -> str | None:
    """Rank ``trials`` by their paired ratio against the baseline when all have one from the same interleaved run
    (sets ``ranked_speed``), and say so — with the runner-up when its spread overlaps the fastest's. Total
    throughput (items ÷ time) lets a few slow blocks decide: tune crowned int8 by it while the bench's verdict, on
    the same run, put int8 at 0.975× [0.957–0.991] fp32 and bf16 fastest. None when they cannot be paired."""
    cmps = [t.vs_baseline for t in trials]
    paired = [c is not None and ((c.get("interleaved") and c.get("ratio")) or c.get("verdict") == "baseline")
              for c in cmps]  # the baseline itself: 1.0 by definition
    if len(trials) < 2 or not all(paired) or len({c["baseline"] for c in cmps if c}) != 1:
        return None
    for t in trials:
        t.ranked_speed = t.vs_baseline["ratio"]  # type: ignore[index]
    first, second = sorted(trials, key=lambda t: -(t.ranked_speed or 0.0))[:2]

    def shown(t: Trial) -> str:
        c = t.vs_baseline or {}
        spread = f" [{c['p25']:.3g}–{c['p75']:.3g}]" if c.get("p25") is not None and c.get("p75") is not None else ""
        return f"{t.name} {c['ratio']:.3g}×{spread}"

    note = (f"speed ranked by the median of paired blocks against {cmps[0]['baseline']} (the bench's verdict), not "  # type: ignore[index]
            f"total throughput: fastest {shown(first)}, next {shown(second)}")
    # the baseline's spread is exactly 1 (it has no p25/p75 of its own): fp32 1× beside bf16 0.702× [0.656–1.3] is
    # within the spread, and the note said nothing of it
    if speed_order(first, second) == 0:
        note += " — within the run-to-run spread of each other"
    return note


def _objective_key(trial: Trial, objective: str) -> float:
    if objective == "throughput":
        return -_speed(trial)
    if objective == "latency":
        return trial.latency_s if trial.latency_s is not None else float("inf")
    return float(trial.memory_bytes) if trial.memory_bytes is not None else float("inf")


def _dominates(a: Trial, b: Trial) -> bool:
    """a is clearly better on speed, memory or accuracy drop and clearly worse on none (``accelkit.tune.ranking``:
    differences inside the noise are ties, so the Pareto column marks only the recipes truly on the front)."""
    return dominates(a, b)


def _gate(accuracy: dict[str, Any] | None, max_drop: float, *, logits: bool | None = None) -> dict[str, Any]:
    """The default gate on the bench's drift figures: top-1 agreement (class/vocab outputs) or cosine
    similarity of at least 1 − max_drop against the fp32 output on the same batch. ``logits=False`` (a workload
    whose output is a hidden state: BERT's encoder) gates on cosine even where the bench guessed a class axis from
    the shape. An accuracy with neither figure (no reference output, or an output with inf/NaN: its note says
    which) fails, with the note as the reason."""
    accuracy = accuracy or {}
    if accuracy.get("identical"):
        return {"passed": True, "criterion": "identical", "candidate_value": 1.0, "threshold": 1 - max_drop}
    top1 = accuracy.get("top1_agreement") if logits is not False else None
    cosine = accuracy.get("cosine")
    criterion, value = ("top1", top1) if top1 is not None else ("cosine", cosine)
    if value is None:
        return {"passed": False, "criterion": "none",
                "reason": accuracy.get("note") or "no fp32 reference output to compare with"}
    threshold = 1 - max_drop
    gate = {"passed": value >= threshold, "criterion": criterion, "candidate_value": value, "threshold": threshold}
    if not gate["passed"]:
        shown, limit = _distinct(value, threshold)
        gate["reason"] = f"{criterion} {shown} < {limit} (1 − --max-accuracy-drop {max_drop:g})"
    return gate


def _distinct(value: float, limit: float) -> tuple[str, str]:
    """Both numbers with as many significant digits as it takes to tell them apart (cosine 0.99999999 against a
    threshold of 1 reads '1 < 1' at the usual four)."""
    for digits in range(4, 18):
        shown, bound = f"{value:.{digits}g}", f"{limit:.{digits}g}"
        if shown != bound:
            return shown, bound
    return repr(value), repr(limit)


def snippet(recipe: Recipe, *, training: bool = False, device_type: str = "cuda") -> str:
    """Paste-ready code for a recipe (only the fields that differ from the defaults). ``apply`` reads
    ``model.training`` to choose the training or the inference form of a recipe, so the comment names the mode the
    workload was tuned in (an ``llm-train`` snippet said "model.eval() first for inference"). fp16 training adds the
    GradScaler the measured step used (``device_type``'s): printed without it, fp16 gradients underflow to zero."""
    defaults = Recipe().to_dict()
    fields = ", ".join(f"{k}={v!r}" for k, v in recipe.to_dict().items() if defaults[k] != v)
    mode = "model.train() first: tuned for training" if training else "model.eval() first: tuned for inference"
    code = (
        "from accelkit.core import Recipe\n"
        "from accelkit.recipes import apply\n\n"
        f"model = apply(model, Recipe({fields}))  # {mode}"
    )
    if training and recipe.precision == "fp16":  # as accelkit.bench.workloads.base.train_step runs it
        code = "import torch\n" + code + (
            f"\nscaler = torch.amp.GradScaler({device_type!r})  # fp16 training needs loss scaling, as measured\n"
            "# each step: scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()")
    return code


def tune(workload: BenchWorkload, config: TuneConfig | None = None, *, store: ResultStore | None = None,
         reporter: Any = None, on_step: Callable[[str], None] | None = None) -> TuneResult:
    """Search recipes for ``workload``; measures with the bench runner and stores every trial.

    ``reporter`` receives the bench runner's progress (per recipe: load, first call, warm-up, measuring);
    ``on_step`` the search's own steps around it. If the store refuses a write (the quick probe, a trial, the
    summary) the search goes on without storing and the result is still returned, with ``store_error`` set."""
    import uuid

    config = config or TuneConfig()
    step = on_step or (lambda text: None)
    device = resolve_device(config.device)
    if workload.task == "input":
        raise UserError("tune searches model recipes; the dataloader workload has none — use `accelkit bench dataloader`")
    hardware, catalog = identify(device)
    notes: list[str] = []
    writer = StoreWriter(store)  # the probe's and the summary's rows (the bench's own writer stores the trials)
    trials = [Trial(name, recipe) for name, recipe in candidate_recipes(workload, compile=config.compile,
                                                                        cuda=device.startswith("cuda"))]
    run_id = uuid.uuid4().hex[:12]
    _refuse(trials, workload, device, step)                                          # 1. what cannot run here
    ran_quick_probe, quick_probe_id = _quick_probe(device, hardware, store, writer, step, notes,
                                                   min_time_s=quick_probe_min_time(config.measurement_loop.min_time_s),
                                                   dtypes=probe_dtypes(trials, config, device))
    unestimated = _prune_by_estimate(trials, workload, device, catalog, config, step)  # 2. the memory budget
    measured = _select(trials, config, unestimated, notes)                           # 3. the trial budget
    check_memory_objective(config, device, measured, unestimated)
    # 4. measure, interleaved, with the fp32 output as the accuracy reference
    run = _measure(workload, measured, config, device, store, reporter, run_id, step,
                   save=writer.can_write, auto_probe=not (ran_quick_probe and quick_probe_id is None))
    step("gating accuracy against fp32 and finding the Pareto frontier")
    doc = run.to_json()
    training = workload.task == "train"
    ranked_step = _record_measured(measured, doc, config, interrupted=run.interrupted,
                                   logits=workload.output_is_logits, training=training)
    _note_gates(measured, ranked_step, training, notes)
    check_measured_budget(measured, config.memory_budget_bytes)
    _choose_memory_basis(measured, device)
    # 5. Pareto frontier (speed, memory, accuracy) among the passing, and the winner by objective
    winner, passing = _rank(trials, config, device, notes)
    result = TuneResult(workload=workload.label, objective=config.objective, device=device, trials=trials,
                        winner=winner, winner_unsupported=unsupported(
                            winner, passing, config.objective, memory=memory_ranked(trials, device)) if winner else None,
                        snippet=snippet(winner.recipe, training=training, device_type=device.split(":")[0])
                        if winner else None, run_id=run_id, notes=notes + run.notes, ran_quick_probe=ran_quick_probe,
                        quick_probe_id=quick_probe_id, store_error=writer.error, ranked_step=ranked_step)
    result.unstored_results += writer.unstored  # (the quick probe's row)
    result.record_run(doc)  # the trials that were measured are all in the result, stored or not
    result.store_summary(writer, name=f"tune {workload.label} ({config.objective})", hardware=run.hardware,
                         details={"config": config.to_dict()}, run_id=run_id)
    return result


def _note_gates(measured: list[Trial], ranked_step: str | None, training: bool, notes: list[str]) -> None:
    """Notes on what was ranked and gated: the step of a workload that measures several per recipe, and the
    training check (with why it could not tell, where it could not)."""
    if ranked_step is not None:
        names = next((", ".join(str(s["step"]) for s in t.steps) for t in measured if len(t.steps) > 1), "")
        notes.append(f"each recipe measures {names}: speed and latency are ranked on the {ranked_step} step (memory on "
                     "the highest peak of its steps); every step's figures are in each trial's `steps` (--json)")
    if training:
        notes.append(f"training gate: besides the forward before any step, each recipe's loss must fall over its first "
                     f"steps at least {MIN_TRAIN_PROGRESS:.0%} as far as fp32's (same weights, same data)")
        unsure = [t for t in measured if (t.gate or {}).get("inconclusive")]
        if unsure:
            notes.append(f"training gate inconclusive for {', '.join(t.name for t in unsure)}: "
                         f"{(unsure[0].gate or {}).get('reason')}")


def probe_dtypes(trials: list[Trial], config: TuneConfig, device: str) -> tuple[str, ...]:
    """The matmul dtypes of tune's quick probe: `hw probe`'s own (fp32 and bf16 on a CPU: the planner's), then the
    MFU dtype of each recipe the search will measure — the runnable ones up to --max-trials (the bench's MFU peaks
    read them from this probe's row). Without them the bench ran a second quick probe for a dtype this one lacked
    (fp16), which measured the copy bandwidth and the kernel probes again: a tiny BERT tune probed for 17 s on the
    2-core VM, 12 s with one probe. With --memory-budget the planner may prune one of these and let a later recipe
    in: a dtype of its that is not here is still probed by the bench."""
    support = supported_dtypes(device)
    runnable = [t for t in trials if t.status == "pending"][: config.max_trials]
    wanted = [*CPU_DEFAULT_DTYPES, *(Variant(explicit_recipe=t.recipe, label=t.name).matmul_dtype for t in runnable)]
    return tuple(d for d in dict.fromkeys(wanted) if support.get(d, "not probed") is None)


def _quick_probe(device: str, hardware: str, store: ResultStore | None, writer: StoreWriter,
                 step: Callable[[str], None], notes: list[str], *, min_time_s: float | None = None,
                 dtypes: tuple[str, ...] | None = None) -> tuple[bool, int | None]:
    """On a CPU with no stored probe: a quick one (the planner models a CPU from its probe; without one every memory
    estimate would be missing), measuring no longer a loop than ``min_time_s`` (None: --quick's) and the matmuls
    of ``dtypes`` (None: `hw probe`'s own; :func:`probe_dtypes`). Whether it ran, and its stored id (None: not
    stored)."""
    if not (device == "cpu" and store is not None and store.latest("probe", hardware=hardware) is None):
        return False, None

    step("no stored probe of this CPU: a quick `hw probe` for the planner's estimates")
    measured_probe = probe(ProbeConfig(device="cpu", dtypes=dtypes, quick=True, min_time_s=min_time_s),
                           on_step=lambda text: step(f"quick probe: {text}"))
    quick_probe_id = writer.add(measured_probe)
    if quick_probe_id is not None:
        notes.append("no `hw probe` of this CPU was stored: ran a quick one for the planner's estimates")
    else:  # the search still runs, without the planner's estimates, and stores nothing
        notes.append("no `hw probe` of this CPU was stored and the quick one run now could not be stored: the "
                     "planner's memory estimates may be missing")
    return True, quick_probe_id


def _refuse(trials: list[Trial], workload: BenchWorkload, device: str, step: Callable[[str], None]) -> None:
    """Mark what this device (and this workload) cannot run."""
    step(f"checking which of {len(trials)} recipes {device} can run")
    for t in trials:
        variant = Variant(explicit_recipe=t.recipe, label=t.name)
        reason = device_refusal(variant, device, training=workload.task == "train") or workload.refusal(variant, device)
        if reason:
            t.status, t.reason = "refused", reason


def _prune_by_estimate(trials: list[Trial], workload: BenchWorkload, device: str, catalog: Any, config: TuneConfig,
                       step: Callable[[str], None]) -> dict[str, list[str]]:
    """The planner's memory estimate against the budget: prune what is over it. Returns why the planner has no
    estimate → the recipes it has none for (with a budget they are held to it by their measured peak; on a CPU they
    leave memory unranked)."""
    step("estimating each recipe's memory with the planner")
    budget = config.memory_budget_bytes
    unestimated: dict[str, list[str]] = {}
    for t in trials:
        if t.status != "pending":
            continue
        estimate, why = predict_variant(workload, Variant(explicit_recipe=t.recipe, label=t.name), device, catalog)
        if estimate is not None:
            t.estimated_bytes = int(estimate.memory_bytes.get("total", 0)) or None
        if budget is not None and t.estimated_bytes and t.estimated_bytes > budget:
            t.status = "pruned"
            t.reason = over_budget("planner estimates", t.estimated_bytes, budget)
        elif t.estimated_bytes is None:
            unestimated.setdefault(str(why or "its estimate has no total"), []).append(t.name)
    return unestimated


def _select(trials: list[Trial], config: TuneConfig, unestimated: dict[str, list[str]], notes: list[str]) -> list[Trial]:
    """The trials to measure: the runnable ones up to --max-trials (the fp32 baseline always runs: it is the accuracy
    and speed reference, and without it the search stops here)."""
    runnable = [t for t in trials if t.status == "pending"]
    if not runnable or runnable[0].name != "fp32":
        fp32 = next((t for t in trials if t.name == "fp32"), None)
        if fp32 is not None and fp32.status == "pruned":  # the budget, not the device: say so, with the figures
            raise UserError(f"--memory-budget prunes the fp32 baseline: {fp32.reason} (the estimate includes the "
                            "planner's framework allowance, 2 GiB by default); raise --memory-budget, or drop it")
        raise UserError("the fp32 baseline cannot run here; nothing to compare against")
    for t in runnable[config.max_trials:]:
        t.status, t.reason = "skipped", f"beyond --max-trials {config.max_trials}"
    measured = runnable[: config.max_trials]
    if config.memory_budget_bytes is not None:
        for why, names in _among(unestimated, measured).items():
            notes.append(f"no memory estimate for {', '.join(names)} ({why}): measured, then held to --memory-budget "
                         "by the measured peak")
    return measured


def _among(unestimated: dict[str, list[str]], trials: list[Trial]) -> dict[str, list[str]]:
    """``unestimated`` (why → recipe names) restricted to ``trials``, leaving out reasons with none of them."""
    names = {t.name for t in trials}
    return {why: kept for why, all_names in unestimated.items() if (kept := [n for n in all_names if n in names])}


def check_memory_objective(config: TuneConfig, device: str, measured: list[Trial],
                           unestimated: dict[str, list[str]]) -> None:
    """Refuse ``--objective memory`` on a CPU where the planner has no estimate for every recipe to measure: their
    measured RSS peaks depend on the order the recipes run in — the first (fp32, always) is charged the runtime's
    own warm-up, and the same two recipes swapped places when run in the other order (found in review)."""
    missing = _among(unestimated, measured)
    if config.objective == "memory" and not device.startswith("cuda") and missing:
        why = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in missing.items())
        raise UserError(f"--objective memory on a CPU ranks the planner's memory estimates, and it has none for {why} "
                        "(measured RSS peaks depend on the order the recipes run in); use --objective throughput or "
                        "latency, or tune on a GPU")


def _measure(workload: BenchWorkload, measured: list[Trial], config: TuneConfig, device: str,
             store: ResultStore | None, reporter: Any, run_id: str, step: Callable[[str], None], *, save: bool,
             auto_probe: bool) -> BenchRunResult:
    """Measure the selected trials with the bench runner, interleaved, the fp32 output the accuracy reference."""
    loop = config.measurement_loop
    # a quick probe the store refused is not there for the bench's MFU peaks to find: it would measure the same
    # probe again, for an MFU the tune's document does not carry (and with saving off, nothing stores it)
    bench = BenchConfig(device=device, loop=loop, interleave=True, accuracy=True, predict=False, save=save,
                        auto_probe=auto_probe)
    variants = [Variant(explicit_recipe=t.recipe, label=t.name) for t in measured]
    step(f"measuring {len(measured)} recipes ({', '.join(t.name for t in measured)}), interleaved")
    return run_benchmark(workload, variants, bench, store=store, reporter=reporter, run_id=run_id)


def _record_measured(measured: list[Trial], doc: dict[str, Any], config: TuneConfig, *, interrupted: bool,
                     logits: bool | None, training: bool = False) -> str | None:
    """Each measured trial's figures and accuracy gate from the run's document (``training``: the loss check too); a
    trial with no entry is refused, failed or interrupted, as the document says. ``logits`` None: guessed from the
    output's shape. Returns the step ranked where the workload measures several per recipe (None: one)."""
    entries: dict[str, list[dict[str, Any]]] = {}
    for e in doc["variants"]:  # every step of a recipe (llm: prefill, decode), in the order the workload runs them
        entries.setdefault(e["name"], []).append(e)
    failures = {f["name"]: f"{f['phase']}: {f['error']}" for f in doc["failed"]}
    for refused in doc["refused"]:
        t = next(x for x in measured if x.name == refused["name"])
        t.status, t.reason = "refused", refused["reason"]
    reference_losses = (entries.get("fp32") or [{}])[-1].get("loss_first_steps")
    ranked = None
    for t in measured:
        steps = entries.get(t.name)
        if not steps:
            if t.status == "pending":
                t.status, t.reason = (("failed", failures[t.name]) if t.name in failures else
                                      ("interrupted", "not measured (interrupted)") if interrupted else
                                      ("failed", "not measured"))
            continue
        t.status = "measured"
        _figures(t, steps)
        ranked = t.step if len(steps) > 1 else ranked
        t.gate = _gate(t.accuracy, config.max_accuracy_drop, logits=logits) if t.name != "fp32" else {
            "passed": True, "criterion": "reference", "candidate_value": 1.0, "threshold": 1 - config.max_accuracy_drop}
        if training and t.name != "fp32" and t.gate["passed"]:
            _gate_training(t.gate, reference_losses, steps[-1].get("loss_first_steps"))
        t.passed = bool(t.gate["passed"])
        if not t.passed and t.gate.get("reason"):  # the figure and the threshold it missed, or why there is none
            which = "training" if (t.gate.get("training") or {}).get("passed") is False else "accuracy"
            t.reason = f"{which} gate: {t.gate['reason']}"
    return ranked


def _figures(t: Trial, steps: list[dict[str, Any]]) -> None:
    """A trial's figures from its entries in the run's document: speed and latency of the last step the workload
    runs (llm: decode, the steady state of generation — prefill is the time to its first token), memory the highest
    peak of its steps, and every step's own figures in ``steps``."""
    t.steps = [{"step": e.get("step"), "throughput": e["throughput"]["value"], "unit": e["throughput"]["unit"],
                "latency_s": e["latency_s"]["median"], "memory_bytes": e["memory_bytes"].get("peak"),
                "vs_baseline": e.get("comparison")} for e in steps]
    last = t.steps[-1]
    t.step, t.throughput, t.unit, t.latency_s = last["step"], last["throughput"], last["unit"], last["latency_s"]
    t.vs_baseline = last["vs_baseline"]
    t.memory_bytes = t.measured_peak_bytes = max((s["memory_bytes"] for s in t.steps if s["memory_bytes"] is not None),
                                                 default=None)
    t.memory_basis = "measured peak"
    t.accuracy = steps[-1].get("accuracy")


#: a training recipe's loss must fall over the first steps at least this share as far as fp32's: the gate on one
#: eval-mode forward before any step passed a recompute whose blocks got no gradient (found in review) — its loss
#: fell 36% as far as fp32's; bf16, fp16 and working recompute 98–100% (tiny Llama and ResNet)
MIN_TRAIN_PROGRESS = 0.8


def training_gate(reference: list[float] | None, losses: list[float] | None) -> dict[str, Any]:
    """Whether a training recipe learns as fp32 does, from the losses of the first steps the bench records
    (``loss_first_steps``: the first call and the warm-up, from the same weights on the same data for every recipe).
    ``candidate_value`` is its progress: the sum over steps 2…n of its loss's fall from its own first loss ÷ the
    same sum for fp32 (each from its own first loss: a precision's offset in the forward is not progress); at least
    MIN_TRAIN_PROGRESS passes. Inconclusive with fewer than two steps in common, or where fp32's loss fell too
    little for the recipe's first-loss offset from fp32 not to swing the ratio by the allowed shortfall."""
    ref, mine = list(reference or []), list(losses or [])
    n = min(len(ref), len(mine))
    gate: dict[str, Any] = {"criterion": f"loss fall over the first {n} steps vs fp32's", "steps": n,
                            "threshold": MIN_TRAIN_PROGRESS}
    if n < 2:
        return {**gate, "passed": False, "inconclusive": True, "reason": f"{n} training step's loss recorded for "
                "comparing with fp32; raise --warmup so that several are"}
    ref, mine = ref[:n], mine[:n]
    if not all(math.isfinite(x) for x in mine):
        step = next(i for i, x in enumerate(mine) if not math.isfinite(x)) + 1
        return {**gate, "passed": False, "reason": f"its training loss was not finite at step {step} of {n}"}
    ref_fall = sum(ref[0] - x for x in ref[1:]) if all(math.isfinite(x) for x in ref) else 0.0
    if ref_fall * (1 - MIN_TRAIN_PROGRESS) <= abs(mine[0] - ref[0]) * (n - 1):
        return {**gate, "passed": False, "inconclusive": True, "reason": f"fp32's loss fell too little over the first "
                f"{n} steps ({ref[0]:.6g} → {ref[-1]:.6g}) to tell whether this recipe trains; raise --lr or --warmup"}
    progress = sum(mine[0] - x for x in mine[1:]) / ref_fall
    gate.update(passed=progress >= MIN_TRAIN_PROGRESS, candidate_value=progress)
    if not gate["passed"]:
        gate["reason"] = (f"its loss fell {progress:.0%} as far as fp32's over the first {n} steps (< "
                          f"{MIN_TRAIN_PROGRESS:.0%}): it does not train as fp32 does")
    return gate


def _gate_training(gate: dict[str, Any], reference: list[float] | None, losses: list[float] | None) -> None:
    """Add the training check to a passed forward ``gate``: it fails (or is inconclusive) with the check."""
    training = gate["training"] = training_gate(reference, losses)
    if not training["passed"]:
        gate["passed"], gate["reason"] = False, training["reason"]
        if training.get("inconclusive"):
            gate["inconclusive"] = True


def _choose_memory_basis(measured: list[Trial], device: str) -> None:
    """One basis for every trial, so the memory axis compares like with like: CUDA → the measured peak; a CPU → the
    planner's estimate when it has one for every trial (RSS deltas of a small model are noise)."""
    done = [t for t in measured if t.status in ("measured", "over-budget")]
    if not device.startswith("cuda") and done and all(t.estimated_bytes for t in done):
        for t in done:
            t.memory_bytes, t.memory_basis = t.estimated_bytes, "planner estimate"


def memory_ranked(trials: list[Trial], device: str) -> bool:
    """Whether the memory figures may rank recipes: CUDA's measured peaks, or a CPU's planner estimates. A CPU's
    measured RSS peaks are not comparable: they depend on the order the recipes run in (the first measured, always
    fp32, is charged the runtime's own warm-up), so they are shown but rank nothing."""
    basis = next((t.memory_basis for t in trials if t.memory_basis), None)
    return device.startswith("cuda") or basis != "measured peak"


def _rank(trials: list[Trial], config: TuneConfig, device: str, notes: list[str]) -> tuple[Trial | None, list[Trial]]:
    """The Pareto frontier (speed, memory, accuracy) among the passing trials, and the winner by objective; returns
    (winner, the passing trials). Memory counts only where :func:`memory_ranked`."""
    basis = next((t.memory_basis for t in trials if t.memory_basis), None)
    memory = memory_ranked(trials, device)
    if basis == "planner estimate":
        notes.append("memory column: the planner's estimate (on a CPU the RSS deltas of a small model are mostly "
                     "noise; the bench rows keep the measured RSS)")
    elif not memory:
        notes.append("memory column: measured RSS peak (the planner had no estimate for every recipe); on a CPU it "
                     "depends on the order the recipes run in, so the Pareto column and the winner leave memory out")
    passing = [t for t in trials if t.passed and t.status == "measured"]  # over-budget: passed, not ranked
    if (ranked := rank_by_paired_ratios(passing)) is not None:
        notes.append(ranked)
    for t in passing:
        t.pareto = not any(dominates(o, t, memory=memory) for o in passing if o is not t)
    winner = min(passing, key=lambda t: _objective_key(t, config.objective)) if passing else None
    if passing:
        notes.append(f"pareto: {sum(t.pareto for t in passing)} of {len(passing)} passing recipes — one is off the "
                     f"front when another is clearly better on speed{', memory' if memory else ''} or accuracy and "
                     "clearly worse on none (differences inside the run-to-run spread"
                     f"{', 5% of memory' if memory else ''} or a tenth of the allowed accuracy drop are ties)")
    return winner, passing
