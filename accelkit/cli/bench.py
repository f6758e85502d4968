"""`accelkit bench WORKLOAD | --suite quick|reference`: a thin shell over ``accelkit.bench``."""

from __future__ import annotations

import sys
from typing import Any

import typer

from accelkit.cli.output import JsonOption, csv_list, emit, err, flag_values, out
from accelkit.core import UserError

WORKLOAD_NAMES = ("bert", "resnet", "llm", "llm-train", "dataloader", "custom")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


def _bools(value: str | None, field: str) -> list[bool] | None:
    items = csv_list(value, field=field, choices=("off", "on", "false", "true"))
    return None if items is None else [v in ("on", "true") for v in items]


def _ints(value: str | None, field: str) -> list[int] | None:
    items = csv_list(value, field=field)
    if items is None:
        return None
    try:
        return [int(v) for v in items]
    except ValueError:
        raise UserError(f"{field} {value!r} is not valid; give whole numbers such as 0,2,4") from None


def _workload_config(name: str, flags: dict[str, Any]) -> dict[str, Any]:
    """Flags given on the command line → the workload's config fields; a flag the workload does not
    take is a usage error that lists the ones it does."""
    import dataclasses

    from accelkit.bench.workloads import get_workload

    fields = {f.name for f in dataclasses.fields(get_workload(name).config_cls)}
    given = {k: v for k, v in flags.items() if v is not None}
    unknown = sorted(set(given) - fields)
    if unknown:
        flag = lambda f: "--" + f.replace("_", "-").replace("step-time-s", "step-time")  # noqa: E731
        raise UserError(f"{', '.join(flag(u) for u in unknown)} does not apply to `bench {name}`; it takes "
                        f"{', '.join(flag(f) for f in sorted(fields))}")
    if name == "custom" and "module" not in given:
        raise UserError("`bench custom` needs --module package.module:factory")
    return given


class _CliReporter:
    """Progress on stderr: a live bar on a terminal, one line per phase otherwise (logs, pipes)."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.live = err.is_terminal and not quiet
        self.progress: Any = None
        self.tasks: dict[str, Any] = {}
        if self.live:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                                     TimeElapsedColumn(), console=err, transient=True)
            self.progress.start()

    def _line(self, text: str) -> None:
        if self.live:
            self.progress.console.print(text, highlight=False, markup=False)
        elif not self.quiet:
            err.print(text, highlight=False, markup=False, soft_wrap=True)

    def refused(self, variant: str, reason: str) -> None:
        err.print(f"refused {variant}: {reason}", highlight=False, markup=False, soft_wrap=True)

    def phase(self, lane: str, text: str) -> None:
        if self.live:
            if lane not in self.tasks:
                self.tasks[lane] = self.progress.add_task(lane, total=1.0, info=text)
            self.progress.update(self.tasks[lane], info=text)
        else:
            self._line(f"{lane}: {text}")

    def progress_(self, lane: str, iterations: int, measured_s: float, loop: Any) -> None:
        if not self.live or lane not in self.tasks:
            return
        frac = min(iterations / loop.min_iterations, measured_s / loop.min_time_s if loop.min_time_s else 1.0)
        self.progress.update(self.tasks[lane], completed=min(frac, 1.0), info=f"{iterations} it, {measured_s:.1f} s")

    def note(self, text: str) -> None:
        self._line(text)

    def stored(self, variant: str, result_ids: list[int]) -> None:
        ids = ", ".join(map(str, result_ids))
        self._line(f"finished {variant}" + (f": stored as result {ids}" if ids else " (not stored: --no-save)"))

    def close(self) -> None:
        if self.live:
            self.progress.stop()


def _reporter(quiet: bool) -> Any:
    from accelkit.bench.runner import Reporter

    cli = _CliReporter(quiet)

    class Adapter(Reporter):
        def refused(self, variant: str, reason: str) -> None:
            cli.refused(variant, reason)

        def phase(self, lane: str, text: str) -> None:
            cli.phase(lane, text)

        def progress(self, lane: str, iterations: int, measured_s: float, config: Any) -> None:
            cli.progress_(lane, iterations, measured_s, config)

        def note(self, text: str) -> None:
            cli.note(text)

        def stored(self, variant: str, result_ids: list[int]) -> None:
            cli.stored(variant, result_ids)

    adapter = Adapter()
    adapter.close = cli.close  # type: ignore[attr-defined]
    return adapter


def bench_cmd(
    workload: str = typer.Argument(None, help="bert | resnet | llm | llm-train | dataloader | custom (or use --suite)."),
    suite: str = typer.Option(None, "--suite", help="quick (tiny models, ~1 min on a CPU) or reference."),
    size: str = typer.Option(None, "--size", help="bert: tiny|base|large; resnet: tiny|50|152."),
    model: str = typer.Option(None, "--model", help="Model preset or config.json (llm, llm-train; also bert/resnet)."),
    batch_size: int = typer.Option(None, "--batch-size", min=1, help="Batch size (per workload default)."),
    seq_len: int = typer.Option(None, "--seq-len", min=1, help="Sequence length (bert: 384; llm-train: 512)."),
    prompt_len: int = typer.Option(None, "--prompt-len", min=1, help="llm: prompt tokens (prefill)."),
    output_len: int = typer.Option(None, "--output-len", min=1, help="llm: generated tokens (decode)."),
    image_size: int = typer.Option(None, "--image-size", min=8, help="resnet/dataloader: image side in pixels."),
    module: str = typer.Option(None, "--module", help="custom: package.module:factory → (model, inputs[, loss_fn])."),
    items_per_step: int = typer.Option(None, "--items-per-step", min=1, help="custom: items per step (default: batch dim)."),
    dataset: str = typer.Option(None, "--dataset", help="dataloader: package.module:factory → Dataset (default synthetic)."),
    num_workers: str = typer.Option(None, "--num-workers", help="dataloader: comma list, e.g. 0,2,4."),
    pin_memory: str = typer.Option(None, "--pin-memory", help="dataloader: comma list of off,on."),
    prefetch_factor: str = typer.Option(None, "--prefetch-factor", help="dataloader: comma list, e.g. 2,4."),
    step_time: float = typer.Option(None, "--step-time", min=0.0, help="dataloader: training-step seconds → input-bound?"),
    precision: str = typer.Option(None, "--precision", help="Comma list of fp32,tf32,bf16,fp16,fp8,int8 (default fp32)."),
    compile_: bool = typer.Option(False, "--compile", help="Add torch.compile variants."),
    recompute: bool = typer.Option(False, "--recompute", help="Add activation-checkpointing variants (training)."),
    channels_last: bool = typer.Option(False, "--channels-last", help="Add channels-last variants (CNNs)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda[:N]."),
    quick: bool = typer.Option(False, "--quick", help="Short loops (seconds); percentiles flagged as not backed."),
    warmup: int = typer.Option(None, "--warmup", min=0, help="Minimum warm-up iterations (default 10)."),
    warmup_time: float = typer.Option(None, "--warmup-time", min=0.0, help="Minimum warm-up seconds (default 2)."),
    min_iterations: int = typer.Option(None, "--min-iterations", min=1, help="Measure at least N iterations (default 10)."),
    min_time: float = typer.Option(None, "--min-time", min=0.0, help="… and at least S seconds (default 10)."),
    max_iterations: int = typer.Option(None, "--max-iterations", min=1, help="Hard cap on measured iterations."),
    interleave: bool = typer.Option(True, "--interleave/--no-interleave", help="Variants in rounds A B A B … (default) or one after another."),
    accuracy: bool = typer.Option(True, "--accuracy/--no-accuracy", help="Output drift of each variant against fp32."),
    probe: bool = typer.Option(True, "--probe/--no-probe", help="On a CPU without a stored probe, run a quick one for MFU."),
    save: bool = typer.Option(True, "--save/--no-save", help="Store the results."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the random weights and inputs."),
    nproc_per_node: int = typer.Option(None, "--nproc-per-node", min=1, help="Distributed: processes per node, launched by torchrun (llm-train, resnet)."),
    zero: int = typer.Option(None, "--zero", help="Distributed: 0 = DDP, 2 = FSDP2 without reshard after forward, 3 = FSDP2 full shard."),
    nnodes: str = typer.Option(None, "--nnodes", help="Distributed: nodes, N or MIN:MAX (torchrun elastic)."),
    node_rank: int = typer.Option(None, "--node-rank", min=0, help="Distributed: this node's rank with a fixed --nnodes (static rendezvous)."),
    rdzv_endpoint: str = typer.Option(None, "--rdzv-endpoint", help="Distributed: HOST:PORT of the rendezvous (multi-node)."),
    as_json: bool = JsonOption,
) -> None:
    """Measure what this machine delivers on a reference workload or your model, across precisions."""
    from accelkit.timing import LoopConfig

    if (workload is None) == (suite is None):
        raise UserError("give a workload (bert, resnet, llm, llm-train, dataloader, custom) or --suite quick|reference")
    if workload is not None and workload not in WORKLOAD_NAMES:
        from accelkit.core import UnknownNameError

        raise UnknownNameError("workload", workload, WORKLOAD_NAMES)
    with flag_values():
        precisions = csv_list(precision, field="--precision", choices=PRECISIONS)
        base = LoopConfig.quick() if quick else None
        loop_flags = {"warmup_iterations": warmup, "warmup_time_s": warmup_time, "min_iterations": min_iterations,
                      "min_time_s": min_time, "max_iterations": max_iterations}
        loop_given = {k: v for k, v in loop_flags.items() if v is not None}
        from accelkit.bench.runner import BenchConfig

        config = BenchConfig(device=device, interleave=interleave, accuracy=accuracy, auto_probe=probe, save=save,
                             seed=seed)
        if workload is not None:
            cfg = _workload_config(workload, {
                "size": size, "model": model, "batch_size": batch_size, "seq_len": seq_len, "prompt_len": prompt_len,
                "output_len": output_len, "image_size": image_size, "module": module, "items_per_step": items_per_step,
                "dataset": dataset, "num_workers": _ints(num_workers, "--num-workers"),
                "pin_memory": _bools(pin_memory, "--pin-memory"),
                "prefetch_factor": _ints(prefetch_factor, "--prefetch-factor"), "step_time_s": step_time,
            })
            if workload == "dataloader" and (precisions or compile_ or recompute or channels_last):
                raise UserError("--precision/--compile/--recompute/--channels-last do not apply to `bench dataloader`;"
                                " it varies --num-workers, --pin-memory and --prefetch-factor")
            loop = (base or LoopConfig()).replace(**loop_given)
            config = config.replace(loop=loop)
    from accelkit.results import ResultStore

    dist_flags = {"nproc_per_node": nproc_per_node, "zero": zero, "nnodes": nnodes, "node_rank": node_rank,
                  "rdzv_endpoint": rdzv_endpoint}
    dist_config = _dist_config(dist_flags, suite)
    reporter = _reporter(quiet=False)
    try:
        with ResultStore() as store:
            if suite is not None:
                from accelkit.bench.suite import get_suite, run_suite

                loop = (base or get_suite(suite).loop).replace(**loop_given)
                result: Any = run_suite(suite, config, loop=loop, store=store, reporter=reporter)
            else:
                from accelkit.bench.runner import run_benchmark
                from accelkit.bench.variants import matrix
                from accelkit.bench.workloads import make_workload

                with flag_values():
                    wl = make_workload(workload, cfg)
                    variants = matrix(precisions or ["fp32"], compile=compile_, recompute=recompute,
                                      channels_last=channels_last)
                if dist_config is not None:
                    from accelkit.distributed.bench_launch import run_distributed_bench

                    result = run_distributed_bench(wl, variants, config, dist_config, store=store, reporter=reporter)
                else:
                    result = run_benchmark(wl, variants, config, store=store, reporter=reporter)
    finally:
        reporter.close()
    _render(result, as_json)


def _dist_config(flags: dict[str, Any], suite: str | None) -> Any:
    """The torchrun layout when any distributed flag is given (else None: one process)."""
    given = {k: v for k, v in flags.items() if v is not None}
    if not given:
        return None
    if suite is not None:
        raise UserError("--nproc-per-node/--zero/--nnodes apply to one workload (llm-train, resnet), not --suite")
    from accelkit.distributed.launch import DistConfig

    with flag_values():
        return DistConfig.from_dict(given)


def _render(result: Any, as_json: bool) -> None:
    from accelkit.report.tables import bench_footnotes, bench_table, published_table

    data = result.to_json()
    runs = data.get("runs", [data])

    def render() -> None:
        for run in runs:
            if run["variants"]:
                out.print(bench_table(run))
            for line in bench_footnotes(run):
                out.print(line, highlight=False, markup=False, soft_wrap=True)
            out.print()
        for skipped in data.get("skipped", []):
            out.print(f"skipped {skipped['key']}: {skipped['reason']}", highlight=False, markup=False)
        if data.get("published"):
            out.print(published_table(data["published"]))
        if data["result_ids"]:
            err.print(f"stored {len(data['result_ids'])} results (run {data['run_id']}); "
                      "`accelkit report` draws them", highlight=False)

    emit(data, as_json, render)
    if data["interrupted"]:
        finished = sum(len({v["name"] for v in r["variants"]}) for r in runs)
        unfinished = [u for r in runs for u in r.get("unfinished", [])]
        err.print(f"interrupted: kept {finished} finished variant(s) in the store "
                  f"(result ids {', '.join(map(str, data['result_ids'])) or 'none'}); not finished: "
                  f"{', '.join(unfinished) or 'the rest of the suite'}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(130)
