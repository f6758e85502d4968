"""Measuring: each variant through the phases of docs/methodology.md — load → first call → warm-up → steady
state — as *lanes*. A lane is one (variant, step): LLM inference has two steps (prefill, decode), so two lanes
per variant. Nothing here builds a result; ``accelkit.bench.record`` turns finished lanes into typed results.

A variant that raises (in any phase) is recorded as failed with its error and freed; the others go on.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelkit.bench.metrics import drift
from accelkit.bench.reference import Reference, free, step_flops
from accelkit.bench.trackers import energy_tracker, memory_tracker
from accelkit.bench.variants import Variant
from accelkit.bench.workloads.base import BenchWorkload, Prepared, Step
from accelkit.core.bench_result import Accuracy, Failure, OutputGate, Refusal, finite
from accelkit.timing import Block, LoopConfig, block_iterations, interleaved_blocks, lane_done, warm_up

if TYPE_CHECKING:
    from accelkit.bench.runner import BenchConfig, Reporter

#: training steps whose loss is kept (first call + warm-up), for comparing precisions over the first steps
LOSS_STEPS = 10


@dataclass
class Lane:
    """One (variant, step): its prepared callable and everything measured about it."""

    variant: Variant
    step: Step
    load_s: float
    load_bytes: int | None
    base_bytes: int | None = None  # resident before the variant loaded
    resident_bytes: int | None = None  # what the variant holds after its warm-up (weights, optimizer state, caches)
    first_call_s: float | None = None
    warmup_iterations: int = 0
    warmup_s: float = 0.0
    per_iteration_s: float = 0.0
    samples: list[float] = field(default_factory=list)
    block_walls: list[float] = field(default_factory=list)
    block_rates: list[float] = field(default_factory=list)  # items/s per block (for the A/B pairs)
    step_peak_bytes: float | None = None
    reserved_peak_bytes: float | None = None
    energy_j: float | None = None
    accuracy: Accuracy | None = None
    gate: OutputGate | None = None  # the workload's own accuracy gate (text-to-image: latents and image)
    losses: list[Any] | None = None  # loss tensors of the first steps, then floats (None: not a training step)
    recipe_notes: list[str] = field(default_factory=list)  # what the recipe did to the model (Prepared.notes)

    @property
    def name(self) -> str:
        return f"{self.variant.name} · {self.step.name}"

    def add_block(self, block: Block) -> None:
        self.samples.extend(block.samples_s)
        self.block_walls.append(block.wall_s)
        self.block_rates.append(len(block.samples_s) * self.step.items / block.wall_s if block.wall_s > 0 else 0.0)

    def done(self, loop: LoopConfig) -> bool:
        return lane_done(len(self.samples), sum(self.block_walls), loop)


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


class Measurer:
    """The lanes of one run, and the variants that failed."""

    def __init__(self, workload: BenchWorkload, config: BenchConfig, device: str, reporter: Reporter,
                 reference: Reference):
        self.workload, self.config, self.device, self.reporter = workload, config, device, reporter
        self.reference = reference
        self.loop = config.loop
        self.memory, self.memory_reason = memory_tracker(device)
        self.energy, self.energy_reason = energy_tracker(device)
        self.lanes: list[Lane] = []
        self.prepared: dict[str, Prepared] = {}
        self.failures: list[Failure] = []
        self.refusals: list[Refusal] = []  # variants a recipe refused as it was applied (``refuse``)
        self.interrupt_requested = False
        self.interrupt_signal = "SIGINT"  # or SIGTERM: which one stopped the run (runner._catch_sigint)
        self.phase = "load"
        #: why the run has no fp32 reference output when the fp32 variant, which stands in for it, failed first
        self.reference_failure: str | None = None
        #: why the fp32 variant failed in its setup, whether or not it had produced its output (it may have, and
        #: then failed counting the FLOPs the meta device could not: ``Reference.flops_note`` names this)
        self.reference_variant_failure: str | None = None

    def checkpoint(self) -> None:
        """Raise the Ctrl-C that a finalizer may have swallowed (see ``runner._catch_sigint``)."""
        if self.interrupt_requested:
            raise KeyboardInterrupt

    # ---- one variant -----------------------------------------------------------------------------------
    def setup(self, variant: Variant) -> list[Lane]:
        """Load, first call and warm-up of ``variant``; [] when it failed (recorded, freed)."""
        self.phase = "load"
        error = ""
        refused = None
        try:
            lanes = self._load(variant)
            self.phase = "warm-up"
            for lane in lanes:
                self._warm(lane)
            if self._counts_flops(variant) and self.workload.task == "train":
                # after the warm-up: counting runs training steps on this very model, and before the first steps'
                # losses were kept it moved the reference's weights ahead of every other recipe's (the training
                # gate then refused recipes bit-identical to fp32)
                self.phase = "counting FLOPs"
                self._count_flops(variant)
            return lanes
        except Exception as exc:  # one variant's failure is data; its siblings go on
            # (lazy: the recipes import torch, and the CLI imports this module before it says it is starting)
            from accelkit.recipes.base import RecipeRefused

            # a recipe refuses as it is applied, while loading: a refusal (later it would be a failure)
            if isinstance(exc, RecipeRefused) and self.phase == "load":
                refused = str(exc)
            else:
                error = _error(exc)  # (not the exception: its traceback would keep the model alive)
        if refused is not None:
            self.refuse(variant, refused)
            return []
        if variant.is_reference:
            self.reference_variant_failure = f"the reference variant {variant.name} failed in its {self.phase}: {error}"
            if self.reference.output is None:  # the others' drift had no reference to go on
                self.reference_failure = self.reference_variant_failure
        self.fail(variant.name, self.phase, error)
        return []

    def refuse(self, variant: Variant, reason: str) -> None:
        """Record ``variant`` as refused: a recipe it asks for refused this model as it was applied (``--recompute``
        on a model without repeated blocks, int8 where no Linear qualifies) — the same one line and ``refused``
        entry as a variant the device cannot run, not a failure (it was 'FAILED …(load): RecipeRefused', exit 1,
        and a `tune` trial 'failed'). Its lanes are dropped and its model freed."""
        if variant.is_reference:  # (plain fp32 applies no recipe; kept in step with ``setup``'s failure path)
            self.reference_variant_failure = f"the reference variant {variant.name} was refused: {reason}"
            if self.reference.output is None:
                self.reference_failure = self.reference_variant_failure
        self.refusals.append(Refusal(name=variant.name, reason=reason))
        self.reporter.refused(variant.name, reason)
        self._drop(variant.name)
        self.lanes = [lane for lane in self.lanes if lane.variant.name != variant.name]
        free(self.device, idle=not self.prepared)

    def fail(self, name: str, phase: str, error: str) -> None:
        """Record ``name`` as failed, drop its lanes and free its model."""
        failure = Failure(name=name, phase=phase, error=error)
        self.failures.append(failure)
        self.reporter.failed(name, phase, failure.error)
        self._drop(name)  # while its lanes are still listed: their step functions (and the model) are let go too
        self.lanes = [lane for lane in self.lanes if lane.variant.name != name]
        free(self.device, idle=not self.prepared)

    def _load(self, variant: Variant) -> list[Lane]:
        self.checkpoint()
        name = variant.name
        self.reporter.phase(name, "load")
        before = self._resident()
        t0 = time.perf_counter()
        prepared = self.workload.prepare(variant, self.device, seed=self.config.seed)
        load_s = time.perf_counter() - t0
        after = self._resident()
        self.prepared[name] = prepared
        lanes = [Lane(variant, step, load_s, None if before is None or after is None else max(0, after - before),
                      base_bytes=before, losses=[] if step.returns_loss else None, recipe_notes=list(prepared.notes))
                 for step in prepared.steps]
        self.lanes.extend(lanes)
        output = self._output(prepared, before_first_call=True)
        self.phase = "first call"
        for lane in lanes:  # first call: cold start, includes compilation
            self.checkpoint()
            self.reporter.phase(lane.name, "first call")
            t0 = time.perf_counter()
            result = lane.step.fn()
            self._sync()
            lane.first_call_s = time.perf_counter() - t0
            if lane.losses is not None:
                lane.losses.append(result.detach())  # type: ignore[attr-defined]
        if output is None:
            output = self._output(prepared, before_first_call=False)
        if variant.is_reference and self.workload.task != "input" and self.reference.output is None \
                and output is not None:
            self.reference.output = output  # plain fp32 is its own reference
        if self._counts_flops(variant) and self.workload.task != "train":  # (training: after its warm-up)
            self._count_flops(variant)
        accuracy = drift(self.reference.output, output, logits=self.workload.output_is_logits) \
            if output is not None and self.reference.output is not None \
            else None
        if accuracy is None and output is not None and self.reference_failure is not None:
            # an output to compare, and the reference it would be compared with failed before producing its own
            accuracy = Accuracy(note=f"no fp32 reference output ({self.reference_failure})")
        gate = self.workload.output_gate(self.reference.output, output) \
            if output is not None and self.reference.output is not None else None
        for lane in lanes:
            lane.accuracy, lane.gate = accuracy, gate
        return lanes

    def _counts_flops(self, variant: Variant) -> bool:
        """Whether ``variant`` counts the run's FLOPs: the reference, where the meta device could not count them."""
        return variant.is_reference and self.workload.task != "input" and not self.reference.flops

    def _count_flops(self, variant: Variant) -> None:
        self.reporter.phase(variant.name, "counting FLOPs")
        self.reference.flops = step_flops(self.prepared[variant.name])

    def _output(self, prepared: Prepared, *, before_first_call: bool) -> Any:
        """The output on the evaluation slice, for drift. A training step changes the weights, so training
        workloads evaluate before their first step; inference evaluates after it (keeping any compile
        time in the first call, where it belongs)."""
        if not self.config.accuracy or prepared.evaluate is None:
            return None
        if before_first_call != (self.workload.task == "train"):
            return None
        return prepared.evaluate().detach().float().cpu()

    def _warm(self, lane: Lane) -> None:
        self.checkpoint()
        self.reporter.phase(lane.name, "warm-up")
        fn = lane.step.fn
        losses = lane.losses
        if losses is not None:
            def fn() -> object:  # keeps the first steps' loss tensors (read once, after the warm-up)
                out = lane.step.fn()
                if len(losses) < LOSS_STEPS:
                    losses.append(out.detach())  # type: ignore[attr-defined]
                return out

        lane.warmup_iterations, lane.warmup_s = warm_up(fn, self.loop, device=self.device)
        # sizes the measured blocks; with no warm-up iterations (--warmup 0) the first call is the only timing
        # there is: an overestimate (it may include compilation), so the blocks come out short rather than huge
        lane.per_iteration_s = (lane.warmup_s / lane.warmup_iterations if lane.warmup_iterations
                                else (lane.first_call_s or 0.0) / lane.step.first_call_calls)
        now = self._resident()
        if now is not None and lane.base_bytes is not None:
            lane.resident_bytes = max(0, now - lane.base_bytes)
        if losses is not None:
            lane.losses = [finite(float(x)) for x in losses]

    # ---- the steady state --------------------------------------------------------------------------------
    def measure(self, lanes: list[Lane], on_block: Any = None) -> None:
        """Rounds of blocks over ``lanes`` (one lane = plain blocks until the rule holds). A lane that raises
        fails its variant; the others go on."""
        lanes = [lane for lane in lanes if lane in self.lanes]
        if not lanes:
            return
        counts = [block_iterations(self.loop, lane.per_iteration_s) for lane in lanes]
        failed: set[str] = set()

        def before(i: int) -> None:
            for tracker in (self.memory, self.energy):
                if tracker is not None:
                    tracker.start()

        fns = [lane.step.fn for lane in lanes]

        def on_error(i: int, exc: Exception) -> None:
            name = lanes[i].variant.name
            if name not in failed:
                failed.add(name)
                for k, other in enumerate(lanes):  # the rounds no longer hold its model (a sibling step raises next)
                    if other.variant.name == name:
                        fns[k] = _closed
                self.fail(name, "measure", _error(exc))

        for i, block in interleaved_blocks(fns, self.loop, device=self.device, iterations=counts, before=before,
                                           on_error=on_error):
            lane = lanes[i]
            if lane.variant.name in failed:
                continue  # a sibling step of this variant failed: the rounds go on without it
            lane.add_block(block)
            if self.memory is not None:
                peak = self.memory.stop()
                lane.step_peak_bytes = max(lane.step_peak_bytes or 0.0, peak)
                reserved = getattr(self.memory, "reserved", None)
                if reserved:
                    lane.reserved_peak_bytes = max(lane.reserved_peak_bytes or 0.0, float(reserved))
            if self.energy is not None:
                lane.energy_j = (lane.energy_j or 0.0) + self.energy.stop()
            self.reporter.progress(lane.name, len(lane.samples), sum(lane.block_walls), self.loop)
            if on_block is not None:
                on_block()
            self.checkpoint()

    # ---- housekeeping --------------------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def _resident(self) -> int | None:
        if self.device.startswith("cuda"):
            import torch

            self._sync()
            return int(torch.cuda.memory_allocated(self.device))
        try:
            import psutil

            return int(psutil.Process().memory_info().rss)
        except Exception:
            return None

    def close(self, name: str) -> None:
        """Free a variant's model; keep what was measured about it."""
        self._drop(name)
        free(self.device, idle=not self.prepared)  # idle: no other variant loaded (``free`` freezes the rest)

    def close_all(self) -> None:
        """Free every loaded model with one collection (a collection walks the whole heap: one per variant cost an
        interleaved run of eight recipes eight walks at its end)."""
        if not self.prepared:  # each was closed after it was measured (one after another)
            return
        for name in list(self.prepared):
            self._drop(name)
        free(self.device, idle=True)

    def _drop(self, name: str) -> None:
        """Let go of a variant's model (what only a collection frees, ``free`` does)."""
        prepared = self.prepared.pop(name, None)
        if prepared is not None:
            prepared.close()
            for lane in self.lanes:  # drop the closures that hold the model
                if lane.variant.name == name:
                    lane.step = dataclasses.replace(lane.step, fn=_closed)
        del prepared


def _closed() -> None:
    raise RuntimeError("this variant's model was freed")
