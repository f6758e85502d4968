"""`accelkit tune`."""

from __future__ import annotations

import typer

from accelkit.cli.bench import WORKLOAD_NAMES, _reporter, _workload_config
from accelkit.cli.output import JsonOption, emit, err, flag_values, fmt_num, out, table
from accelkit.core import UnknownNameError, UserError
from accelkit.core.units import fmt_bytes, parse_size


def tune_cmd(
    workload: str = typer.Argument(None, help="bert | resnet | llm | llm-train | custom (or use --module)."),
    module: str = typer.Option(None, "--module", help="package.module:factory → (model, inputs[, loss_fn])."),
    size: str = typer.Option(None, "--size", help="bert: tiny|base|large; resnet: tiny|50|152."),
    model: str = typer.Option(None, "--model", help="Model preset or config.json."),
    batch_size: int = typer.Option(None, "--batch-size", min=1),
    seq_len: int = typer.Option(None, "--seq-len", min=1),
    prompt_len: int = typer.Option(None, "--prompt-len", min=1),
    output_len: int = typer.Option(None, "--output-len", min=1),
    objective: str = typer.Option("throughput", "--objective", help="throughput, latency or memory."),
    max_accuracy_drop: float = typer.Option(0.01, "--max-accuracy-drop", help="Allowed relative drop vs fp32 (0.01 = 1%)."),
    memory_budget: str = typer.Option(None, "--memory-budget", help="Prune recipes the planner says exceed it, e.g. 2GiB."),
    max_trials: int = typer.Option(8, "--max-trials", min=1, help="Most recipes measured, the fp32 baseline included."),
    compile_: bool = typer.Option(True, "--compile/--no-compile", help="Include torch.compile recipes."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda[:N]."),
    thorough: bool = typer.Option(False, "--thorough", help="The bench's full loops instead of quick ones."),
    nproc_per_node: int = typer.Option(1, "--nproc-per-node", min=1, help="2+: tune the gradient compression of a "
                                       "training workload on that many processes (DDP), gated on its loss."),
    as_json: bool = JsonOption,
) -> None:
    """Find the fastest recipe for a workload that stays within the accuracy gate (Pareto frontier + snippet)."""
    from accelkit.bench.workloads import make_workload
    from accelkit.results import ResultStore
    from accelkit.tune import TuneConfig, tune

    if (workload is None) == (module is None):
        raise UserError("give a WORKLOAD (bert, resnet, llm, llm-train) or --module package.module:factory")
    name = workload or "custom"
    if name not in WORKLOAD_NAMES or name == "dataloader":
        raise UnknownNameError("workload", name, [w for w in WORKLOAD_NAMES if w != "dataloader"])
    with flag_values():
        config = TuneConfig(
            objective=objective, max_accuracy_drop=max_accuracy_drop, max_trials=max_trials, device=device,
            quick=not thorough, compile=compile_,
            memory_budget_bytes=parse_size(memory_budget, field="--memory-budget") if memory_budget else None,
        )
        wl = make_workload(name, _workload_config(name, {
            "size": size, "model": model, "batch_size": batch_size, "seq_len": seq_len, "prompt_len": prompt_len,
            "output_len": output_len, "module": module,
        }))
    reporter = _reporter(quiet=False)
    try:
        with ResultStore() as store:
            if nproc_per_node > 1:
                from accelkit.tune.compression import tune_compression

                result = tune_compression(wl, config, nproc_per_node=nproc_per_node, store=store, reporter=reporter)
            else:
                result = tune(wl, config, store=store, reporter=reporter)
    finally:
        reporter.close()
    data = result.to_json()

    def render() -> None:
        rows = []
        for t in result.trials:
            acc = t.gate or {}
            value = acc.get("candidate_value")
            rows.append((
                ("★ " if t is result.winner else "") + t.name, t.status,
                fmt_num(t.throughput, 1), t.unit, fmt_num(t.latency_s * 1e3 if t.latency_s else None, 2),
                fmt_bytes(t.memory_bytes) if t.memory_bytes else None,
                f"{acc.get('criterion')} {value:.4f}" if value is not None else None,
                "pass" if t.passed else ("fail" if t.status == "measured" else None),
                "yes" if t.pareto else "", t.reason,
            ))
        out.print(table(f"tune {result.workload} — objective: {result.objective} ({result.device})",
                        ["recipe", "status", "throughput", "unit", "p50 ms", "memory", "accuracy", "gate", "pareto",
                         "why"], rows, right=(2, 4)))
        if result.winner is None:
            out.print("No recipe passed the accuracy gate.")
        else:
            out.print(f"Fastest recipe within the gate ({result.objective}): {result.winner.name}")
            out.print(result.snippet, highlight=False, markup=False)
        for note in result.notes:
            out.print(f"note: {note}", highlight=False, markup=False)
        if result.result_id is not None:
            err.print(f"stored as result {result.result_id} (run {result.run_id})")

    emit(data, as_json, render)
