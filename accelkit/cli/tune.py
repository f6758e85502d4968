"""`accelkit tune`: the search settings are flags generated from TuneConfig; the workload flags go to the
workload's own config (a flag it does not take is a usage error that lists the ones it does)."""

from __future__ import annotations

from typing import Any

import typer

from accelkit.bench.runner import Reporter
from accelkit.bench.workloads import config_fields, make_workload
from accelkit.cli.bench import (
    DIST_FLAGS,
    LOOP_FLAGS,
    LOOP_PARSE,
    check_loop_flags,
    check_workload,
    collective_timeout_option,
    exit_stopped,
    refuse_shadowed,
    sigterm_as_interrupt,
)
from accelkit.cli.helptext import examples
from accelkit.cli.output import JsonOption, Progress, ProgressOption, emit, err, flag_values, fmt_num, out, table
from accelkit.cli.spec_options import float_reader, refuse_infinite, spec_options
from accelkit.cli.store import open_for_saving, print_unsaved
from accelkit.core import AccelkitError, UnknownNameError, UserError
from accelkit.core.units import fmt_bytes, parse_size
from accelkit.timing import LoopConfig
from accelkit.tune import tune
from accelkit.tune.search import TuneConfig, TuneResult

#: workloads with model recipes to search (the dataloader has none)
TUNE_WORKLOADS = ("bert", "resnet", "llm", "llm-train", "custom")


def _chosen_workload(workload: str | None, module: str | None) -> str | None:
    """The built-in workload to tune (None: ``--module``'s factory), or the usage error for what was given."""
    # `tune custom --module X` is `tune --module X` (`tune custom` alone built a CustomConfig without its module:
    # an internal error)
    if workload == "custom" and module is None:
        raise UserError("`tune custom` needs --module package.module:factory")
    workload = None if workload == "custom" else workload
    if workload is not None and module is not None:  # (it said "give a WORKLOAD … or --module", given both)
        raise UserError(f"give a WORKLOAD or --module, not both: `tune {workload}` tunes the built-in workload, "
                        f"`tune --module {module}` your factory's model")
    if workload is None and module is None:
        raise UserError("give a WORKLOAD (bert, resnet, llm, llm-train) or --module package.module:factory")
    if workload == "diffusion":  # a bench workload (its pipelines' recipes are measured there), not a tune one
        raise UserError("tune has no diffusion workload; measure a pipeline's recipes with `accelkit bench diffusion`, "
                        "or tune bert, resnet, llm, llm-train or --module")
    return workload


def _memory_budget(text: str) -> int:
    return parse_size(text, field="--memory-budget")


def _workload_flags(name: str, flags: dict[str, Any]) -> dict[str, Any]:
    """The given workload flags, checked against the fields of that workload's config."""
    fields = config_fields(name)
    given = {k: v for k, v in flags.items() if v is not None}
    unknown = sorted(set(given) - fields)
    if unknown:
        def flag(field: str) -> str:
            return "--" + field.replace("_", "-")

        raise UserError(f"{', '.join(flag(u) for u in unknown)} does not apply to `tune {name}`; it takes "
                        f"{', '.join(flag(f) for f in sorted(fields) if f in flags)}")
    return given


class _Reporter(Reporter):
    """The bench runner's progress callbacks (those not drawn keep Reporter's do-nothing default), drawn on one
    Progress: a line per recipe phase, then the measuring rounds (how many recipes already meet their stopping
    rule)."""

    def __init__(self, bar: Progress, *, saving: bool):
        self.bar, self.saving = bar, saving
        self.done: dict[str, float] = {}

    def refused(self, variant: str, reason: str) -> None:
        self.bar.log(f"refused {variant}: {reason}")

    def phase(self, lane: str, text: str) -> None:
        self.bar.update(f"{lane}: {text}", step=f"{lane}: {text}")

    def progress(self, lane: str, iterations: int, measured_s: float, loop: Any) -> None:
        need = [iterations / loop.min_iterations if loop.min_iterations else 1.0,
                measured_s / loop.min_time_s if loop.min_time_s else 1.0]
        self.done[lane] = min(1.0, min(need))
        finished = sum(1 for v in self.done.values() if v >= 1.0)
        self.bar.update(f"measuring {lane}: {iterations} it, {measured_s:.1f} s ({finished}/{len(self.done)} recipes "
                        "have enough samples)", step="measuring")  # the first round always gets a line

    def note(self, text: str) -> None:
        self.bar.log(text)

    def stored(self, variant: str, result_ids: list[int]) -> None:
        why = "the store refused it; see the end" if self.saving else "--no-save"
        self.bar.log(f"finished {variant}" + (f": stored as result {', '.join(map(str, result_ids))}" if result_ids
                                              else f" (not stored: {why})"))


#: each overrides one field of the measurement loop --quick or --thorough picks (``TuneConfig.measurement_loop``)
LOOP_HELPS = {"warmup_iterations": "Minimum warm-up iterations per recipe (default 3; --thorough 10).",
              "warmup_time_s": "Minimum warm-up seconds per recipe (default 0.5; --thorough 2).",
              "min_iterations": "Measure each recipe at least N iterations (default 10) …",
              "min_time_s": "… and at least S seconds (default 1.5; --thorough 10).",
              "max_iterations": "Hard cap on measured iterations per recipe (default none)."}

EXAMPLES = examples(
    "accelkit tune bert --size tiny",
    "accelkit tune llm --model tiny-llama --objective latency --max-accuracy-drop 0.02",
    "accelkit tune --module mypkg.models:factory --memory-budget 2GiB",
)

@collective_timeout_option("--nproc-per-node")
@spec_options(LoopConfig, into="loop", names=LOOP_FLAGS, parse=LOOP_PARSE, helps=LOOP_HELPS)
@spec_options(
    TuneConfig, into="search", exclude=("loop",),
    names={"memory_budget_bytes": "--memory-budget", "quick": "--quick/--thorough", "compile": "--compile/--no-compile"},
    parse={"memory_budget_bytes": _memory_budget},
    helps={"memory_budget_bytes": "Prune recipes the planner says exceed it, and rank none whose measured peak "
                                  "does, e.g. 2GiB.",
           "quick": "Short measurement loops (seconds per recipe), or --thorough: the bench's full loops."},
)
def tune_cmd(
    workload: str | None = typer.Argument(None, help="bert | resnet | llm | llm-train | custom (or use --module)."),
    module: str | None = typer.Option(None, "--module", help="package.module:factory → (model, inputs[, loss_fn])."),
    size: str | None = typer.Option(None, "--size", help="bert: tiny|base|large; resnet: tiny|50|152."),
    model: str | None = typer.Option(None, "--model", help="Model preset or config.json."),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1, help="Items per step; not given: the workload's default."),
    seq_len: int | None = typer.Option(None, "--seq-len", min=1, help="bert, llm-train: tokens per sequence."),
    prompt_len: int | None = typer.Option(None, "--prompt-len", min=1, help="llm: prompt tokens per sequence."),
    output_len: int | None = typer.Option(None, "--output-len", min=1, help="llm: generated tokens per sequence."),
    lr: float | None = typer.Option(None, "--lr", min=0.0, parser=float_reader("lr", 0.0, None, None), help="llm-train, resnet: the training step's learning "
                                    "rate (default: the bench's, 1e-4 AdamW | 0.1 SGD); with --nproc-per-node the "
                                    "quality check trains at it — e.g. 3e-3 for llm-train."),
    quality_steps: int | None = typer.Option(None, "--quality-steps", min=1, help="--nproc-per-node: training steps "
                                             "of the quality check (none and each compression train them on the "
                                             "same data from the same weights; default 50)."),
    save: bool = typer.Option(True, "--save/--no-save", help="Store every trial and the summary."),
    nproc_per_node: int = typer.Option(1, "--nproc-per-node", min=1, help="2+: tune the gradient compression of a "
                                       "training workload on that many processes (DDP), gated on its loss."),
    as_json: bool = JsonOption,
    progress: bool | None = ProgressOption,
    *,
    search: dict[str, Any],
    loop: dict[str, Any],
    dist: dict[str, Any],
) -> None:
    """Find the fastest recipe for a workload that stays within the accuracy gate (Pareto frontier + snippet)."""
    workload = _chosen_workload(workload, module)
    if dist and nproc_per_node == 1:  # one process: no launch, no process group for it to bound
        given = ", ".join(DIST_FLAGS.get(f, f) for f in dist)
        raise UserError(f"{given} applies to --nproc-per-node N (the torchrun launch that tunes gradient "
                        "compression); add --nproc-per-node 2 or more, or drop it")
    if quality_steps is not None and nproc_per_node == 1:
        raise UserError("--quality-steps applies to --nproc-per-node N (the quality check of gradient compression); "
                        "add --nproc-per-node 2 or more, or drop it")
    name = workload or "custom"
    if name not in TUNE_WORKLOADS:
        raise UnknownNameError("workload", name, TUNE_WORKLOADS)
    refuse_infinite("--lr", lr, "lr")  # (typer's float takes inf: it trained at lr=inf)
    refuse_shadowed(f"accelkit tune {name}", {"size": size, "model": model}, lambda field: size is not None)

    with flag_values():
        config = TuneConfig(**search)
        check_loop_flags(loop)  # a --max-iterations below a --min-iterations also given is refused, as bench does
        if loop:  # the given loop flags replace those fields of --quick's (or --thorough's) loop
            config = config.replace(loop=config.measurement_loop.replace(**loop))
        wl = make_workload(name, _workload_flags(name, {
            "size": size, "model": model, "batch_size": batch_size, "seq_len": seq_len, "prompt_len": prompt_len,
            "output_len": output_len, "module": module, "lr": lr,
        }))
        check_workload(wl)  # before the factory's call below imports torch (`tune --module nope` took 2 s)
    if name == "custom":
        _build_custom(wl, module)
    store = open_for_saving(save)  # before the search: an unwritable store fails now, not after it
    try:
        # SIGTERM stops the search as Ctrl-C does, and says so (exit 143); it exited 130 "interrupted" (found in review)
        with sigterm_as_interrupt() as received, Progress(f"tune {name}", show=progress) as bar:
            reporter = _Reporter(bar, saving=save)
            if nproc_per_node > 1:
                # lazy: the torchrun launcher's modules (accelkit.distributed) load only for a multi-process run
                from accelkit.tune.compression import tune_compression

                result = tune_compression(wl, config, nproc_per_node=nproc_per_node, quality_steps=quality_steps,
                                          store=store, reporter=reporter,
                                          collective_timeout_s=dist.get("collective_timeout_s"))
            else:
                result = tune(wl, config, store=store, reporter=reporter, on_step=lambda text: bar.update(text, step=text))
            bar.stopped = result.interrupted
    finally:
        if store is not None:
            store.close()
    data = result.to_json()
    unfinished = ", ".join(result.unfinished) or "none"
    if result.store_error is not None:  # every measured trial is in the document: print it rather than lose it
        print_unsaved(data, AccelkitError(result.store_error), stored=_stored(result), unstored=_unstored(result),
                      interrupted=f"not finished: {unfinished}" if result.interrupted else None,
                      importable=bool(result.unstored_results))

    failed = all_failed(result)

    def render() -> None:
        out.print(tune_table(result))
        if result.winner is None and result.interrupted and not any(
                t.status in ("measured", "over-budget") for t in result.trials):
            out.print("No verdict: the search was stopped before any recipe was measured.")
        elif failed is not None:
            out.print("No verdict: every recipe tried failed (the why column says how).")
        elif result.winner is None:
            out.print("No winner: the quality check was inconclusive (see the note below)." if any(
                (t.gate or {}).get("inconclusive") for t in result.trials) else
                "No recipe within --memory-budget passed the accuracy gate (over-budget: see why)." if any(
                t.status == "over-budget" and t.passed for t in result.trials) else "No recipe passed the accuracy gate.")
        else:
            out.print(winner_line(result), highlight=False, markup=False)
            out.print(result.snippet, highlight=False, markup=False)
        for note in result.notes:
            out.print(f"note: {note}", highlight=False, markup=False)
        if result.result_id is not None:
            err.print(f"stored as result {result.result_id} (run {result.run_id})")

    emit(data, as_json, render)
    if result.interrupted:
        exit_stopped("SIGTERM" in received or result.stopped_by == "SIGTERM",
                     f"stored {', '.join(_stored(result)) or 'nothing'}; not finished: {unfinished}")
    if failed is not None:  # as `accelkit bench` exits 1 when no variant was measured (tune said "No recipe passed
        raise AccelkitError(failed)  # the accuracy gate", exit 0, for a model whose every run raised; found in the hunt)


def all_failed(result: TuneResult) -> str | None:
    """Why nothing was measured when every recipe tried raised (the model's forward fails, an OOM), else None."""
    if result.interrupted or any(t.status in ("measured", "over-budget") for t in result.trials):
        return None
    failed = [t for t in result.trials if t.status == "failed"]
    if not failed:
        return None
    return (f"no recipe was measured: all {len(failed)} tried failed ({failed[0].name} — {failed[0].reason}"
            f"{'; the others: see the why column' if len(failed) > 1 else ''})")


def _vs_baseline(t: Any) -> str | None:
    """'1.21× [1.02–1.40]': the paired ratio speed is ranked by (the baseline: '1 (baseline)')."""
    c = t.vs_baseline or {}
    if c.get("verdict") == "baseline":
        return "1 (baseline)"
    if c.get("ratio") is None:
        return None
    spread = f" [{c['p25']:.3g}–{c['p75']:.3g}]" if c.get("p25") is not None and c.get("p75") is not None else ""
    return f"{c['ratio']:.3g}×{spread}"


def tune_table(result: TuneResult) -> Any:
    """One row per recipe. ★ marks the winner only where the table supports it (``TuneResult.winner_unsupported``
    is None); a winner it does not support is marked ? and the line under the table says why."""
    rows = []
    mark = "★ " if result.winner_unsupported is None else "? "
    for t in result.trials:
        acc = t.gate or {}
        value = acc.get("candidate_value")
        rows.append((
            (mark if t is result.winner else "") + t.name, t.status,
            fmt_num(t.throughput, 1), t.unit, _vs_baseline(t), fmt_num(t.latency_s * 1e3 if t.latency_s else None, 2),
            fmt_bytes(t.memory_bytes) if t.memory_bytes else None,
            f"{acc.get('criterion')} {value:.4f}" if value is not None else None,
            "pass" if t.passed else ("inconclusive" if acc.get("inconclusive") else
                                     "fail" if t.gate is not None else None),
            "yes" if t.pareto else "", t.reason,
        ))
    baseline = next((t.name for t in result.trials if (t.vs_baseline or {}).get("verdict") == "baseline"), "fp32")
    # a workload with several steps per recipe (llm: prefill, decode) is ranked on one: the title names it
    step = f", {result.ranked_step} step" if result.ranked_step else ""
    return table(f"tune {result.workload} — objective: {result.objective}{step} ({result.device})",
                 ["recipe", "status", "throughput", "unit", f"vs {baseline} [p25–p75]", "p50 ms", "memory", "accuracy",
                  "gate", "pareto", "why"], rows, right=(2, 4, 5))


def winner_line(result: TuneResult) -> str:
    """The line under the table: the winner the table supports, or the best-ranked recipe and why it is not firm."""
    assert result.winner is not None
    name = result.winner.name
    if result.winner_unsupported is None:
        return f"Fastest recipe within the gate ({result.objective}): {name}"
    return (f"No firm winner within the gate ({result.objective}): {name} ranks first, but "
            f"{result.winner_unsupported} — re-run with --thorough on a quiet machine to separate them; {name}'s "
            "recipe:")


def _stored(result: TuneResult) -> list[str]:
    """The search's stored rows, named: 'the quick probe (result 3)', 'bf16 (result 5)', 'the tune summary …'."""
    return ([f"the quick probe (result {result.quick_probe_id})"] if result.quick_probe_id is not None else []) + [
        f"{t.name} (result {', '.join(map(str, t.result_ids))})" for t in result.trials if t.result_ids] + (
        [f"the tune summary (result {result.result_id})"] if result.result_id is not None else [])


def _unstored(result: TuneResult) -> list[str]:
    """What the store did not take: the quick probe, measured trials, the summary."""
    return (["the quick probe"] if result.ran_quick_probe and result.quick_probe_id is None else []) + [
        t.name for t in result.trials if t.status in ("measured", "over-budget") and not t.result_ids] + (
        ["the tune summary"] if result.result_id is None else [])


def _build_custom(wl: Any, module: str | None) -> None:
    """Call the user's factory now (the workload keeps what it made): when it fails, that is their code —
    one line naming --module, not a traceback from inside the bench runner."""
    try:
        wl.label  # noqa: B018 — builds the model through the factory
    except AccelkitError:
        raise
    except Exception as exc:
        raise AccelkitError(f"--module {module}: building the model failed ({type(exc).__name__}: {exc})") from exc
