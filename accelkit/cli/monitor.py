"""`accelkit monitor` and `accelkit profile`."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any, Literal, NoReturn

import typer

from accelkit.bench.record import StoreWriter
from accelkit.bench.workloads import WORKLOADS, config_fields, make_workload
from accelkit.cli.bench import check_workload, exit_stopped, sigterm_as_interrupt
from accelkit.cli.helptext import examples
from accelkit.cli.output import JsonOption, Progress, ProgressOption, emit, err, flag_values, fmt_num, out, table
from accelkit.cli.spec_options import in_flag_words, spec_options
from accelkit.cli.store import open_for_saving, print_unstored
from accelkit.core import UserError
from accelkit.core.units import fmt_bytes
from accelkit.monitor.config import ExporterConfig
from accelkit.monitor.dashboard import dashboard as build_dashboard
from accelkit.monitor.profile_workload import profile_workload
from accelkit.monitor.profiler import DEFAULT_OUT_DIR, ProfileConfig, ProfileInterrupted

#: the precisions a bench variant takes (accelkit.bench.variants.BenchPrecision)
BenchPrecision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]


def _check_out_dir(path: Path) -> None:
    """--out is a folder the trace goes into: refused before anything runs when it cannot be one."""
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"--out {path}: {parent} is a file, not a folder; give a folder for trace.json")
            break
    if str(path) != DEFAULT_OUT_DIR:  # made now, as the profile would make it: `--out /proc/nope` failed after the
        try:                          # model was built (torch imported, ~6 s)
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--out {path}: the folder cannot be created ({exc.strerror or exc}); give another") from exc


def _check_workload_flags(name: str, options: dict[str, Any]) -> None:
    """The workload flags' values, checked as the profile will check them but before it imports torch (~2 s) and
    starts its progress: `profile bert --size huge` was refused after both. A flag the workload does not take is
    left to the profile, which refuses it, naming the workloads that take it, before torch too."""
    given = {k: v for k, v in options.items() if v is not None}
    if set(given) - config_fields(name):
        return
    try:
        workload = make_workload(name, given)
    except ValueError as exc:  # a value the workload's config refuses: the user's to fix, named by its flag
        raise UserError(in_flag_words(str(exc), {f: "--" + f.replace("_", "-") for f in given})) from exc
    check_workload(workload)


#: the parameters `--dashboard` never reads (spec_options names the generated ones ``<into>__<field>``), and those
#: `--once` never reads (it samples and prints: no server binds)
_NOT_FOR_DASHBOARD = ("once", "exporter__host", "exporter__port", "exporter__interval")
_NOT_FOR_ONCE = ("exporter__host", "exporter__port")


def _refuse_unused_flags(ctx: typer.Context, *, dashboard: bool, once: bool) -> None:
    """`--dashboard` prints the dashboard and exits: --once, --host, --port and --interval given with it were
    dropped without a word (`monitor --once --dashboard` printed no sample), so they are refused; and so are --host
    and --port with --once, which serves nothing."""
    flags = {p.name: p.opts[0] for p in ctx.command.params if p.name is not None}

    def given(names: tuple[str, ...]) -> list[str]:
        return [flags[n] for n in names
                if n in flags and getattr(ctx.get_parameter_source(n), "name", "DEFAULT") != "DEFAULT"]

    if dashboard and (unused := given(_NOT_FOR_DASHBOARD)):
        raise UserError(f"--dashboard prints the Grafana dashboard and exits, so {', '.join(unused)} would do nothing; "
                        "give --dashboard alone, or leave it out to sample (--once) or serve")
    if once and (unused := given(_NOT_FOR_ONCE)):
        raise UserError(f"--once samples and prints, serving nothing, so {', '.join(unused)} would do nothing; drop "
                        f"{'them' if len(unused) > 1 else 'it'}, or leave --once out to serve /metrics")


MONITOR_EXAMPLES = examples(
    "accelkit monitor                          # Prometheus metrics on http://127.0.0.1:9400/metrics",
    "accelkit monitor --once --json            # one sample, then exit",
    "accelkit monitor --dashboard > grafana.json",
)
PROFILE_EXAMPLES = examples(
    "accelkit profile bert --size tiny",
    "accelkit profile llm-train --model tiny-llama --precision bf16 --out prof",
    "accelkit profile llm --model tiny-llama --step decode",
    "accelkit profile --module mypkg.models:factory --steps 3",
)

@spec_options(ExporterConfig, into="exporter")
def monitor_cmd(
    ctx: typer.Context,
    dashboard: bool = typer.Option(False, "--dashboard", help="Print the Grafana dashboard JSON and exit."),
    once: bool = typer.Option(False, "--once", help="Sample once, print the exposition (or --json families) and exit."),
    as_json: bool = JsonOption,
    *,
    exporter: dict[str, Any],
) -> None:
    """Serve device (DCGM names), host and job metrics for Prometheus on /metrics."""
    _refuse_unused_flags(ctx, dashboard=dashboard, once=once)
    if dashboard:
        typer.echo(json.dumps(build_dashboard(), indent=2))
        return
    from prometheus_client import CollectorRegistry

    # lazy: prometheus_client, only when the exporter runs
    from accelkit.monitor.exporter import Exporter, exposition_of, host_in_url
    from accelkit.monitor.registry import REGISTRY

    if as_json and not once:
        raise UserError("--json applies to --once (one sample as JSON); the exporter itself serves /metrics — add --once")
    with flag_values():
        config = ExporterConfig(**exporter)
    if once:
        sampler = Exporter(config, registry=CollectorRegistry())
        families = sampler.collect_once()
        if as_json:
            data = {f.name: [{"labels": s.labels, "value": s.value} for s in f.samples] for f in families}
            emit({"notes": sampler.notes, "families": data}, True, lambda: None)
        else:
            typer.echo(exposition_of(families).decode(), nl=False)
            for note in sampler.notes:  # why series are missing (no GPU, no energy): stderr, as the server mode says
                err.print(f"note: {note}")
        sampler.stop()
        return
    server = Exporter(config, registry=REGISTRY)
    for note in server.notes:  # said once, at start; scrapes stay quiet
        err.print(f"note: {note}")
    bound = server.start()  # a port or host it cannot bind is a UserError naming both and the fix
    # SIGTERM's handler before the line that says it serves: a supervisor (or a test) that stops it as soon as it
    # reads the line found the default handler still there and saw exit -15 instead of a clean stop
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    err.print(f"serving metrics on http://{host_in_url(config.host)}:{bound}/metrics (every {config.interval:g} s); "
              "Ctrl-C stops", markup=False)  # an IPv6 host in brackets, so the URL can be fetched as printed
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


#: the built-in workloads `profile` takes by name (every bench workload; `custom` is --module)
PROFILE_WORKLOADS = tuple(name for name in WORKLOADS if name != "custom")

#: the profile's peak-memory keys in words (a key not named here is shown as it is)
MEMORY_NAMES = {"cuda_max_allocated_bytes": "CUDA max allocated", "cuda_max_reserved_bytes": "CUDA max reserved",
                "process_peak_rss_bytes": "process peak RSS", "peak_rss_increase_bytes": "RSS increase while profiled"}


def _memory_rows(memory: dict[str, Any]) -> list[tuple[str, str]]:
    """The peak-memory record as rows: sizes in binary units, the note (what the figures are) as a row of its own."""
    rows = [(MEMORY_NAMES.get(k, k), fmt_bytes(v) if isinstance(v, (int, float)) else str(v))
            for k, v in memory.items() if k != "note"]
    return rows + ([("what it is", str(memory["note"]))] if memory.get("note") else [])


def _interrupted_profile(stopped: ProfileInterrupted, received: list[str]) -> NoReturn:
    """Say what an interrupted profile left (the partial trace, or nothing) and exit 130, or 143 for SIGTERM."""
    left = (f"the partial trace of the steps recorded so far is at {stopped.trace} (no summary; open it in Perfetto)"
            if stopped.trace is not None else "nothing was written")
    exit_stopped(bool(received), f"not profiled to the end; {left}; nothing was stored")


@spec_options(ProfileConfig, into="profiler", names={"out_dir": "--out", "record_shapes": "--record-shapes/--no-record-shapes"})
def profile_cmd(
    workload: str | None = typer.Argument(None, help="bert, resnet, llm, llm-train … (or use --module)."),
    module: str | None = typer.Option(None, "--module", help="package.module:factory returning (model, example_inputs[, loss_fn])."),
    size: str | None = typer.Option(None, "--size", help="Workload size (e.g. tiny, base, large)."),
    model: str | None = typer.Option(None, "--model", help="Model preset or config.json for the workload."),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1, help="Items per step; not given: the workload's default."),
    seq_len: int | None = typer.Option(None, "--seq-len", min=1, help="Tokens per sequence (bert, llm-train)."),
    prompt_len: int | None = typer.Option(None, "--prompt-len", min=1, help="llm: prompt tokens per sequence."),
    output_len: int | None = typer.Option(None, "--output-len", min=1, help="llm: generated tokens per sequence (the "
                                          "decode cycle)."),
    image_size: int | None = typer.Option(None, "--image-size", min=1, help="resnet, dataloader: image side in "
                                          "pixels."),
    step: str | None = typer.Option(None, "--step", help="Which step of the workload to profile (llm: prefill or "
                                    "decode); default: its first."),
    precision: BenchPrecision = typer.Option("fp32", "--precision", help="Numerics of the profiled step (a bench variant)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda[:N]."),
    save: bool = typer.Option(True, "--save/--no-save", help="Store the summary in the results store."),
    as_json: bool = JsonOption,
    progress: bool | None = ProgressOption,
    *,
    profiler: dict[str, Any],
) -> None:
    """Profile one workload step: top operators, time breakdown, overlap, peak memory, and a trace."""
    # `profile custom --module X` is `profile --module X` (`profile custom` alone built a CustomConfig without its
    # module: an internal error)
    if workload == "custom" and module is None:
        raise UserError("`profile custom` needs --module package.module:factory")
    workload = None if workload == "custom" else workload
    if workload is not None and module is not None:
        raise UserError(f"give a WORKLOAD or --module, not both: `profile {workload}` profiles the built-in workload, "
                        f"`profile --module {module}` your factory's model")
    if workload is None and module is None:  # (it said "…, not both" here too, and named 4 of the 6 workloads)
        raise UserError(f"give a WORKLOAD ({', '.join(PROFILE_WORKLOADS)}) or --module package.module:factory")
    options = {"size": size, "model": model, "batch_size": batch_size, "seq_len": seq_len, "prompt_len": prompt_len,
               "output_len": output_len, "image_size": image_size, "module": module}
    with flag_values():
        config = ProfileConfig(**profiler)
    _check_workload_flags(workload or "custom", options)
    store = open_for_saving(save)  # before profiling: an unwritable store fails now, not after the run
    writer = StoreWriter(store)
    try:
        _check_out_dir(Path(config.out_dir))  # (last: it makes the folder)
        stopped = None
        with sigterm_as_interrupt() as received, Progress("profiling", show=progress) as bar:
            try:
                summary, measurement = profile_workload(workload or "custom", options, config, precision=precision,
                                                        device=device, step_name=step,
                                                        on_step=lambda text: bar.update(text, step=text))
            except ProfileInterrupted as exc:  # (said once the progress display is closed)
                stopped, bar.stopped = exc, True
        if stopped is not None:
            _interrupted_profile(stopped, received)
        result_id = writer.add(measurement)
    finally:
        if store is not None:
            store.close()
    document = {**summary, "result_id": result_id}
    if writer.error is not None:  # as bench does: the usual --json document, with why, printed rather than lost
        print_unstored(document, writer.error, name=measurement.name)

    def render() -> None:
        for key, title in (("top_cpu_ops", "Top operators by self CPU time"), ("top_device_ops", "Top kernels by self device time")):
            if summary[key]:
                rows: list[tuple[Any, ...]] = [(o["name"], fmt_num(o["self_ms_per_step"], 3), f"{o['share'] * 100:.1f}%", fmt_num(o["calls_per_step"], 1))
                        for o in summary[key]]
                out.print(table(title, ["operator", "ms / step", "share", "calls / step"], rows, right=(1, 2, 3)))
        step = summary.get("profiler_step")
        if step:  # the profiler's step range is no operator: its self time is the Python between the ops
            out.print(f"host time outside any operator (ProfilerStep*, not ranked above): "
                      f"{fmt_num(step['self_cpu_ms_per_step'], 3)} ms / step", highlight=False)
        b = summary["breakdown"]
        ex = b["exclusive_fraction"]
        rows = [(k, f"{v * 100:.1f}%") for k, v in ex.items()]
        rows.append(("overlap (of communication)", "-" if b["overlap_pct"] is None else f"{b['overlap_pct']:.1f}%"))
        out.print(table(f"Time breakdown ({b['timeline']} timeline, {b['span_s'] * 1e3:.1f} ms profiled)", ["", "share"], rows, right=(1,)))
        out.print(table("Peak memory", ["", "size"], _memory_rows(summary["peak_memory"]), right=(1,)))
        out.print(f"trace: {summary['trace']} (open in Perfetto or chrome://tracing)")
        if result_id is not None:
            err.print(f"stored as result {result_id}")

    emit(document, as_json, render)

