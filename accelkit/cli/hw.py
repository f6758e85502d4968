"""`accelkit hw list|show|detect|probe`."""

from __future__ import annotations

import math
from typing import Any, NoReturn

import typer

from accelkit.bench.record import StoreWriter
from accelkit.cli.bench import DIST_FLAGS, LOOP_PARSE, collective_timeout_option, exit_stopped, sigterm_as_interrupt
from accelkit.cli.helptext import HelpGroup, examples
from accelkit.cli.output import (
    JsonOption,
    Progress,
    ProgressOption,
    csv_list,
    emit,
    err,
    flag_values,
    fmt_num,
    out,
    table,
)
from accelkit.cli.spec_options import spec_options
from accelkit.cli.store import open_for_saving, print_unstored
from accelkit.core import DeviceSpec, UserError
from accelkit.core.units import and_list, parse_size
from accelkit.distributed.launch import DistConfig
from accelkit.hardware import get_device, list_devices
from accelkit.hardware.detect import detect
from accelkit.hardware.device import check_device_name, resolve_device
from accelkit.hardware.probe import ProbeConfig, ProbeInterrupted
from accelkit.hardware.probe import probe as run_probe

PROBE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
#: ProbeConfig fields (→ their flags) that only the matmul and copy probe reads; --collectives refuses them
_MATMUL_ONLY = {"matmul_size": "--size", "copy_bytes": "--copy-size", "dtypes": "--dtype"}

app = typer.Typer(cls=HelpGroup, help="Accelerator catalog, local detection and the measured roofline.", no_args_is_help=True,
                  epilog=examples("accelkit hw list", "accelkit hw show h200", "accelkit hw probe --quick"))


def _tf(spec: DeviceSpec, dtype: str) -> float | None:
    peak = spec.peak(dtype)
    return peak / 1e12 if peak else None


def _datasheet_gb(spec: DeviceSpec) -> float:
    return spec.memory_datasheet_gb if spec.memory_datasheet_gb is not None else spec.memory_bytes / 1e9


def _from_driver(spec: DeviceSpec) -> bool:
    """Whether memory_bytes is the driver's total (the catalog's memory_MiB) rather than the datasheet's GB."""
    return spec.memory_datasheet_gb is not None and spec.memory_bytes != int(spec.memory_datasheet_gb * 1e9)


def device_json(spec: DeviceSpec) -> dict[str, Any]:
    """The spec in SI bytes/FLOP/s plus the datasheet units people read (GB, TB/s, TFLOP/s)."""
    return {
        **spec.to_dict(),
        "memory_gb": _datasheet_gb(spec),
        "memory_gib": spec.memory_bytes / 2**30,
        "memory_bandwidth_tb_per_s": spec.memory_bandwidth_bytes_per_s / 1e12,
        "peak_tflops": {d: v / 1e12 for d, v in spec.peak_flops.items()},
        "units": "bytes, bytes/s, FLOP/s (GB/TB = 10^9/10^12, GiB = 2^30; memory_gb is the datasheet's figure, "
                 "memory_bytes the driver's total where known; peaks dense, sparsity excluded)",
    }


@app.command("list", epilog=examples("accelkit hw list", "accelkit hw list --json"))
def list_cmd(as_json: bool = JsonOption) -> None:
    """List the catalog: memory, bandwidth, dense peaks, power, fabric, and how the figures were checked."""
    specs = list_devices()

    def render() -> None:
        rows = [
            (
                s.name, s.vendor, f"{_datasheet_gb(s):g}", f"{s.memory_bytes / 2**30:.1f}",
                f"{s.memory_bandwidth_bytes_per_s / 1e12:g}",
                fmt_num(_tf(s, "bf16"), 1), fmt_num(_tf(s, "fp8"), 1), fmt_num(s.tdp_w, 0), s.scaleup_fabric,
                s.status,
            )
            for s in specs
        ]
        out.print(table(
            "Accelerator catalog (dense peaks)",
            ["name", "vendor", "mem GB", "GiB", "TB/s", "bf16 TF", "fp8 TF", "TDP W", "fabric", "status"],
            rows, right=(2, 3, 4, 5, 6, 7),
        ))
        out.print("status: V vendor-checked · V2 two secondary sources agree · R recalled, unverified")

    emit([device_json(s) for s in specs], as_json, render)


@app.command("show", epilog=examples("accelkit hw show h200", "accelkit hw show mi300x --json"))
def show_cmd(name: str = typer.Argument(..., help="Name or alias, e.g. h200, mi300x, tpu-v5p."), as_json: bool = JsonOption) -> None:
    """Show one accelerator's facts with their source."""
    spec = get_device(name)

    def render() -> None:
        rows: list[tuple[str, Any]] = [
            ("name", spec.name), ("aliases", ", ".join(spec.aliases) or "-"), ("vendor", spec.vendor),
            ("memory", f"{_datasheet_gb(spec):g} GB {spec.memory_type} ({spec.memory_bytes / 2**30:.2f} GiB "
                       f"{'as the driver reports it' if _from_driver(spec) else 'from the datasheet'})"),
            ("bandwidth", f"{spec.memory_bandwidth_bytes_per_s / 1e12:g} TB/s"),
        ]
        rows += [(f"dense {d}", f"{v / 1e12:g} T{'OP' if d == 'int8' else 'FLOP'}/s") for d, v in spec.peak_flops.items()]
        rows += [
            ("TDP", f"{spec.tdp_w:g} W" if spec.tdp_w else "-"),
            ("scale-up", f"{spec.scaleup_fabric}, {spec.scaleup_bandwidth_bytes_per_s / 1e9:g} GB/s per direction,"
                         f" domain {spec.scaleup_domain}"
                         + (f", {spec.per_peer_bandwidth_bytes_per_s / 1e9:g} GB/s per peer (mesh)"
                            if spec.per_peer_bandwidth_bytes_per_s else "")),
            ("status", spec.status), ("source", spec.source),
        ]
        out.print(table(spec.name, ["field", "value"], rows))

    emit(device_json(spec), as_json, render)


@app.command("detect", epilog=examples("accelkit hw detect", "accelkit hw detect --json"))
def detect_cmd(as_json: bool = JsonOption) -> None:
    """Describe this machine: GPUs (torch + NVML) or the CPU (model, cores, threads, vector extensions)."""
    info = detect()

    def render() -> None:
        cpu = info["cpu"]
        rows = [
            ("host", info["hostname"]), ("os", info["os"]), ("cpu", cpu["model"]),
            ("cores", f"{cpu['physical_cores']} physical, {cpu['logical_cores']} logical,"
                      f" {cpu['usable_cores']} usable, torch uses {cpu['torch_threads']} threads"),
            ("memory", f"{cpu['memory_bytes'] / 2**30:.1f} GiB"),
            ("vector ext.", " ".join(cpu["vector_extensions"]) or "-"),
        ]
        for dev in info["accelerators"]:
            rows.append((f"gpu {dev['index']}", f"{dev['name']} · {dev['memory_bytes'] / 2**30:.1f} GiB · "
                         f"cc {dev['compute_capability']} · driver {dev.get('driver', '-')} · "
                         f"catalog {dev['catalog_name'] or 'no match'}"))
        if not info["accelerators"]:
            rows.append(("accelerators", "none found (torch sees no CUDA/ROCm device)"))
        sw = info["software"]
        rows.append(("software", f"python {sw['python']} · torch {sw['torch']} · transformers {sw['transformers']}"))
        out.print(table("This machine", ["", ""], rows))

    emit(info, as_json, render)


def _dtypes(text: str) -> tuple[str, ...]:
    dtypes = csv_list(text, field="--dtype", choices=PROBE_DTYPES)
    if not dtypes:
        raise UserError(f"--dtype {text!r} names no dtype; give a comma list of {','.join(PROBE_DTYPES)}")
    return tuple(dict.fromkeys(dtypes))  # once each: `--dtype fp32,fp32` timed fp32 twice and kept one of them


def _copy_size(text: str) -> int:
    size = parse_size(text, field="--copy-size")
    if not (1 << 20) <= size <= (1 << 36):
        raise UserError(f"--copy-size {text} is out of range; give 1MiB to 64GiB")
    return size


@app.command("probe", epilog=examples(
    "accelkit hw probe --quick                  # seconds: a smoke run",
    "accelkit hw probe --dtype fp32,bf16 --copy-size 1GiB",
    "accelkit hw probe --collectives --nproc-per-node 8   # all-reduce & co. across this node's GPUs",
))
@collective_timeout_option("--collectives")
@spec_options(
    ProbeConfig, into="probe", names={"matmul_size": "--size", "copy_bytes": "--copy-size", "dtypes": "--dtype",
                                      "min_time_s": "--min-time"},
    parse={"dtypes": _dtypes, "copy_bytes": _copy_size, "min_time_s": LOOP_PARSE["min_time_s"]},
    helps={"min_time_s": "Seconds each timed loop measures, e.g. 0.1 (default 1 with --quick, else 3; its warm-up is "
                         "at most as long); under 3 the probe is stored as a --quick one.",
           "dtypes": "Comma list of fp32,tf32,bf16,fp16,fp8 (default: fp32,bf16 on CPU; all supported on GPU).",
           "copy_bytes": "Copy buffer, e.g. 256MiB: 1MiB to 64GiB (default 256 MiB CPU, 2 GiB GPU)."},
)
def probe_cmd(
    save: bool = typer.Option(True, "--save/--no-save", help="Store the result in the results store."),
    collectives: bool = typer.Option(False, "--collectives", help="Measure all-reduce/all-gather/reduce-scatter bandwidth instead (torchrun)."),
    nproc_per_node: int | None = typer.Option(
        None, "--nproc-per-node", min=1, max=4096,
        help="--collectives: ranks on this node (one per GPU, or per CPU core; default 2)."),
    max_message_size: str | None = typer.Option(
        None, "--max-message-size", metavar="SIZE", help="--collectives: the largest message, e.g. 1MiB (4 B to 1 GiB): "
        "the sizes go ×4 from 1 KiB (CPU) or 1 MiB (GPU) up to it; default 64 MiB CPU, 1 GiB GPU."),
    as_json: bool = JsonOption,
    progress: bool | None = ProgressOption,
    *,
    probe: dict[str, Any],
    dist: dict[str, Any],
) -> None:
    """Measure this device's matmul peak per dtype and its memory bandwidth (the measured roofline)."""
    if collectives:
        if probe.get("min_time_s") is not None:  # (absent when not given) the collectives' loops are --quick's or full, per message size
            raise UserError("--min-time applies to the matmul and copy probe, not --collectives; use --quick for "
                            "short collective loops, or drop --min-time")
        # the matmul and copy probe's sizes and dtypes: refused, not ignored (`--collectives --copy-size 1GiB` ran
        # the default message sizes and said nothing)
        if matmul_only := [flag for key, flag in _MATMUL_ONLY.items() if probe.get(key) is not None]:
            one = len(matmul_only) == 1
            raise UserError(f"{', '.join(matmul_only)} {'applies' if one else 'apply'} to the matmul and copy probe, "
                            f"not --collectives; drop {'it' if one else 'them'} (--max-message-size sets the largest "
                            "collective message)")
        _collectives(quick=probe["quick"], device=probe["device"], dist=dist, save=save, as_json=as_json,
                     nproc_per_node=2 if nproc_per_node is None else nproc_per_node, progress=progress,
                     max_message_size=max_message_size)
        return
    # the launch's flags without the launch: refused, not ignored (a matmul probe with --nproc-per-node 7 ran as one
    # process and said nothing; found in review)
    launch_flags = {"--nproc-per-node": nproc_per_node, "--max-message-size": max_message_size}
    if dist or any(v is not None for v in launch_flags.values()):
        given = ", ".join([DIST_FLAGS.get(f, f) for f in dist] + [f for f, v in launch_flags.items() if v is not None])
        raise UserError(f"{given} applies to --collectives (the torchrun launch); add --collectives or drop it")

    with flag_values():
        config = ProbeConfig(**probe)
    check_device_name(config.device)  # --device nope: before torch's import and the progress line
    store = open_for_saving(save)  # before measuring: an unwritable store fails now, not after the probe
    try:
        stopped = None
        with sigterm_as_interrupt() as received:
            try:  # outside the progress display: it closes seeing the interrupt, so it says no "probing: done"
                with Progress("probing", show=progress) as bar:
                    result = run_probe(config, on_step=lambda text: bar.update(text, step=text))
            except ProbeInterrupted as exc:  # (said once the progress display is closed)
                stopped = exc
        if stopped is not None:
            _interrupted_probe(stopped, received)
        writer = StoreWriter(store)
        result_id = writer.add(result)
    finally:
        if store is not None:
            store.close()
    document = {**result.to_dict(), "result_id": result_id}
    if writer.error is not None:
        print_unstored(document, writer.error, name=document["name"], importable=True)

    def render() -> None:
        out.print(table(f"Measured roofline — {result.hardware} ({result.details['timer']})",
                        ["what", "median", "unit", "reference", "of ref", "reference is", "CV", "n"],
                        roofline_rows(result.details), right=(1, 3, 4, 6, 7)))
        if result.details["note"]:
            out.print(result.details["note"])
        for m in result.details["matmul"].values():
            if m.get("reduced_why"):
                out.print(m["reduced_why"], markup=False, highlight=False)
        if result_id is not None:
            err.print(f"stored as result {result_id}")

    emit(document, as_json, render)


def _pct(fraction: float | None) -> str | None:
    return None if fraction is None else f"{sig(fraction * 100, 2)}%"  # 1.1%, not 1%; 145%, not 150%


def sig(value: float | None, figures: int = 3) -> str | None:
    """``value`` to ``figures`` significant figures in fixed notation with thousands separators (0.00512, 57.6,
    3,350): a CPU's 0.005 TFLOP/s attention must not print as 0.0 beside a GPU's thousands."""
    if value is None:
        return None
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = min(12, max(0, figures - 1 - math.floor(math.log10(abs(value)))))
    return f"{value:,.{decimals}f}"


def roofline_rows(d: dict[str, Any]) -> list[tuple[Any, ...]]:
    """`hw probe`'s table rows: each figure with the reference its fraction divides by, and what that reference is
    — the catalog's datasheet figure on a known GPU; on a CPU (no datasheet) the kernel probes are fractions of
    this same probe's copy bandwidth or fp32 matmul, and the matmul and copy rows have no reference."""
    catalog = d.get("catalog_name")
    rows: list[tuple[Any, ...]] = []
    for dt, m in d["matmul"].items():
        s = m["stats"]
        ref = m["catalog_peak_tflops"]
        rows.append((f"matmul {dt} ({m['size']}²)", sig(m["tflops"]), "TFLOP/s", sig(ref), _pct(m["fraction_of_peak"]),
                     f"{catalog} dense {dt} peak" if ref else None, f"{s['cv'] * 100:.1f}%", s["n"]))
    bw = d["bandwidth"]
    rows.append(("copy (read+write)", sig(bw["gbps"]), "GB/s", sig(bw["catalog_gbps"]), _pct(bw["fraction_of_peak"]),
                 f"{catalog} memory bandwidth" if bw["catalog_gbps"] else None, f"{bw['stats']['cv'] * 100:.1f}%",
                 bw["stats"]["n"]))
    for key, label, unit in (("elementwise", "elementwise add", "GB/s"), ("attention", "causal attention", "TFLOP/s")):
        if k := d.get(key):  # the planner's kernel classes (accelkit/hardware/kernel_probe.py)
            ref = k.get("reference_gbps", k.get("reference_tflops"))
            # (no reference: the one it is a fraction of was not measured — `--dtype fp16` on a CPU has no fp32
            # matmul — and the row said nothing of why)
            what = k.get("reference") if ref or not k.get("reference") else f"none: {k['reference']} not measured (--dtype)"
            rows.append((label, sig(k.get("gbps", k.get("tflops"))), unit, sig(ref), _pct(k["fraction_of_peak"]),
                         what, f"{k['stats']['cv'] * 100:.1f}%", k["stats"]["n"]))
    return rows


def _interrupted_probe(stopped: ProbeInterrupted, received: list[str]) -> NoReturn:
    """Print the matmul dtypes measured before the interrupt (a probe is stored whole: nothing was) and exit 130, or
    143 for SIGTERM."""
    figures = [f"{d} {m['tflops']:.4g} TFLOP/s (matmul {m['size']}×{m['size']}, CV {m['stats']['cv']:.1%})"
               for d, m in stopped.matmul.items()]
    if stopped.copy_gbps is not None:
        figures.append(f"copy {stopped.copy_gbps:.4g} GB/s")
    left = f"measured before it on {stopped.hardware}: {', '.join(figures)}" if figures else "nothing was measured yet"
    exit_stopped(bool(received), f"{left}; not measured: {and_list(stopped.unfinished)}; nothing was stored (a probe is "
                                 "stored whole)")


def _collectives(*, quick: bool, device: str, nproc_per_node: int, dist: dict[str, Any], save: bool, as_json: bool,
                 progress: bool | None, max_message_size: str | None = None) -> None:
    """`hw probe --collectives`: the library runs torchrun; this renders the bus-bandwidth table."""
    # lazy: the collective probe's modules (accelkit.distributed) load only for `hw probe --collectives`
    from accelkit.distributed.collectives import MAX_MESSAGE_BYTES, CollectiveConfig, probe_collectives
    from accelkit.distributed.rank_failures import notes_only

    # as `hw probe --device` does: a bad name, or cuda without a GPU, is refused (it used to run on the CPU);
    # each rank then takes cuda:LOCAL_RANK whatever index was given
    resolved = resolve_device(device)
    with flag_values({"max_size_bytes": "--max-message-size"}):
        max_size = None if max_message_size is None else parse_size(max_message_size, field="max_size_bytes")
        if max_size is not None and not 4 <= max_size <= MAX_MESSAGE_BYTES:
            raise UserError(f"--max-message-size {max_message_size} is out of range; give 4B to 1GiB")
        config = CollectiveConfig(quick=quick, device="cpu" if resolved == "cpu" else "auto", max_size_bytes=max_size)
        layout = DistConfig(nproc_per_node=nproc_per_node, **dist)
    store = open_for_saving(save)  # checked before torchrun starts; rank 0 writes to the same file
    try:
        with Progress("probing collectives", show=progress) as bar:
            # rank 0's notes only: a heartbeat showed whatever line came last, a failing rank's traceback among
            # them, above the one-line error that names it
            result = probe_collectives(config, layout, store=store, save=save, on_line=notes_only(bar.update))
    finally:
        if store is not None:
            store.close()
    assert result is not None  # one node: rank 0 is here
    if result.get("store_error"):  # rank 0 measured, the store refused its row: print it rather than lose it
        print_unstored(result, result["store_error"], name=result["name"])
    for warning in result.get("warnings", []):  # a rank failed shutting down, after the whole probe
        err.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)

    def render() -> None:
        d = result["details"]
        rows = [(r["op"], f"{r['size_bytes']:,}", f"{r['time_s'] * 1e6:,.1f}", fmt_num(r["algbw_gbps"], 3),
                 fmt_num(r["busbw_gbps"], 3), f"{r['cv'] * 100:.1f}%", r["iterations"]) for r in d["results"]]
        out.print(table(f"Collectives — {d['world_size']} ranks × {result['hardware']} ({d['backend']})",
                        ["op", "size B", "time µs", "algbw GB/s", "busbw GB/s", "CV", "n"], rows,
                        right=(1, 2, 3, 4, 5, 6)))
        out.print(f"busbw: {d['definitions']['busbw']}; GB = 10^9 B")
        if result["result_id"] is not None:
            err.print(f"stored as result {result['result_id']}; `accelkit plan --hardware …` on this hardware now "
                      "uses the all-reduce bus bandwidth")

    emit(result, as_json, render)
