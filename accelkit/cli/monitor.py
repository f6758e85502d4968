"""`accelkit monitor` and `accelkit profile`."""

from __future__ import annotations

import json
import signal
import threading

import typer

from accelkit.cli.output import JsonOption, emit, err, flag_values, fmt_num, out, status, table
from accelkit.core import UserError


def monitor_cmd(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 to expose beyond this machine)."),
    port: int = typer.Option(9400, "--port", min=0, max=65535, help="Port for /metrics (9400, as the DCGM exporter)."),
    interval: float = typer.Option(1.0, "--interval", help="Seconds between hardware samples."),
    dashboard: bool = typer.Option(False, "--dashboard", help="Print the Grafana dashboard JSON and exit."),
    once: bool = typer.Option(False, "--once", help="Sample once, print the exposition (or --json families) and exit."),
    as_json: bool = JsonOption,
) -> None:
    """Serve device (DCGM names), host and job metrics for Prometheus on /metrics."""
    if dashboard:
        from accelkit.monitor.dashboard import dashboard as build

        typer.echo(json.dumps(build(), indent=2))
        return
    from prometheus_client import CollectorRegistry

    from accelkit.monitor import Exporter, ExporterConfig
    from accelkit.monitor.exporter import exposition_of
    from accelkit.monitor.registry import REGISTRY

    with flag_values():
        config = ExporterConfig(host=host, port=port, interval=interval)
    if once:
        registry = CollectorRegistry()
        exporter = Exporter(config, registry=registry)
        families = exporter.collect_once()
        if as_json:
            data = {f.name: [{"labels": s.labels, "value": s.value} for s in f.samples] for f in families}
            emit({"notes": exporter.notes, "families": data}, True, lambda: None)
        else:
            typer.echo(exposition_of(families).decode(), nl=False)
        exporter.stop()
        return
    exporter = Exporter(config, registry=REGISTRY)
    for note in exporter.notes:  # said once, at start; scrapes stay quiet
        err.print(f"note: {note}")
    try:
        bound = exporter.start()
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port") from exc
    err.print(f"serving metrics on http://{host}:{bound}/metrics (every {interval:g} s); Ctrl-C stops")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        exporter.stop()


def profile_cmd(
    workload: str = typer.Argument(None, help="bert, resnet, llm, llm-train … (or use --module)."),
    module: str = typer.Option(None, "--module", help="package.module:factory returning (model, example_inputs[, loss_fn])."),
    size: str = typer.Option(None, "--size", help="Workload size (e.g. tiny, base, large)."),
    model: str = typer.Option(None, "--model", help="Model preset or config.json for the workload."),
    batch_size: int = typer.Option(None, "--batch-size", min=1),
    seq_len: int = typer.Option(None, "--seq-len", min=1),
    precision: str = typer.Option("fp32", "--precision", help="fp32, bf16, fp16 … (a bench variant)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda[:N]."),
    steps: int = typer.Option(5, "--steps", min=1, help="Profiled (active) steps."),
    wait: int = typer.Option(1, "--wait", min=0, help="Steps before recording."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Recorded-then-discarded warm-up steps."),
    top: int = typer.Option(15, "--top", min=1, help="Operators per table."),
    out_dir: str = typer.Option("accelkit-profile", "--out", help="Directory for trace.json and summary.json."),
    save: bool = typer.Option(True, "--save/--no-save", help="Store the summary in the results store."),
    as_json: bool = JsonOption,
) -> None:
    """Profile one workload step: top operators, time breakdown, overlap, peak memory, and a trace."""
    from accelkit.monitor.profile_workload import profile_workload

    if (workload is None) == (module is None):
        raise UserError("give a WORKLOAD (bert, resnet, llm, llm-train) or --module package.module:factory, not both")
    options = {"size": size, "model": model, "batch_size": batch_size, "seq_len": seq_len, "module": module}
    with flag_values():
        from accelkit.monitor.profiler import ProfileConfig

        config = ProfileConfig(wait=wait, warmup=warmup, steps=steps, top=top, out_dir=out_dir)
    with status("profiling"):
        summary, result_id = profile_workload(workload or "custom", options, config, precision=precision, device=device, save=save)

    def render() -> None:
        for key, title in (("top_cpu_ops", "Top operators by self CPU time"), ("top_device_ops", "Top kernels by self device time")):
            if summary[key]:
                rows = [(o["name"], fmt_num(o["self_ms_per_step"], 3), f"{o['share'] * 100:.1f}%", fmt_num(o["calls_per_step"], 1))
                        for o in summary[key]]
                out.print(table(title, ["operator", "ms / step", "share", "calls / step"], rows, right=(1, 2, 3)))
        b = summary["breakdown"]
        ex = b["exclusive_fraction"]
        rows = [(k, f"{v * 100:.1f}%") for k, v in ex.items()]
        rows.append(("overlap (of communication)", "-" if b["overlap_pct"] is None else f"{b['overlap_pct']:.1f}%"))
        out.print(table(f"Time breakdown ({b['timeline']} timeline, {b['span_s'] * 1e3:.1f} ms profiled)", ["", "share"], rows, right=(1,)))
        out.print(f"peak memory: {summary['peak_memory']}")
        out.print(f"trace: {summary['trace']} (open in Perfetto or chrome://tracing)")
        if result_id is not None:
            err.print(f"stored as result {result_id}")

    emit({**summary, "result_id": result_id}, as_json, render)

