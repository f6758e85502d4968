"""`accelkit plan`: memory, FLOPs, time, energy and the parallel layout — for one hardware, or one row
per hardware with --compare. Thin: parse flags → ``accelkit.plan`` → render."""

from __future__ import annotations

from typing import Any

import typer

from accelkit.cli.output import JsonOption, csv_list, emit, err, flag_values, fmt_num, out, table
from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.core.units import fmt_bytes, fmt_count

_TASKS = ("train", "infer")
_RECOMPUTE = ("none", "selective", "full")
_PRECISIONS = ("fp32", "bf16", "fp16", "fp8")


def _choice(value: str | None, flag: str, choices: tuple[str, ...]) -> str | None:
    if value is not None and value not in choices:
        raise UserError(f"{flag} {value!r} is not valid; choose one of {', '.join(choices)}")
    return value


def plan_cmd(
    model: str = typer.Option(..., "--model", help="Preset name or a Hugging Face config.json path."),
    task: str = typer.Option("train", "--task", help="train or infer."),
    hardware: str = typer.Option(None, "--hardware", help="Catalog name (h100, mi300x …) or 'cpu' (uses `hw probe`)."),
    num_devices: int = typer.Option(None, "--num-devices", min=1, help="Devices; omitted: the smallest count that fits."),
    tp: int = typer.Option(None, "--tp", min=1, help="Tensor-parallel degree (searched if omitted)."),
    pp: int = typer.Option(None, "--pp", min=1, help="Pipeline stages (searched if omitted)."),
    dp: int = typer.Option(None, "--dp", min=1, help="Data-parallel degree (searched if omitted)."),
    ep: int = typer.Option(None, "--ep", min=1, help="Expert-parallel degree, MoE (searched if omitted)."),
    zero: int = typer.Option(None, "--zero", min=0, max=3, help="ZeRO stage 0-3 (searched if omitted)."),
    recompute: str = typer.Option(None, "--recompute", help="none, selective or full (searched if omitted)."),
    sequence_parallel: bool = typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                           help="Megatron sequence parallelism (searched if omitted)."),
    micro_batch: int = typer.Option(None, "--micro-batch", min=1, help="Sequences per micro-batch (searched if omitted)."),
    global_batch: int = typer.Option(None, "--global-batch", min=1, help="Sequences per step (default ≈ 4 Mi tokens)."),
    seq_len: int = typer.Option(None, "--seq-len", min=1, help="Training sequence length (default min(4096, model max))."),
    precision: str = typer.Option("bf16", "--precision", help="fp32, bf16, fp16 or fp8."),
    optimizer: str = typer.Option("adam", "--optimizer", help="adam or sgd (with momentum)."),
    offload: bool = typer.Option(False, "--offload", help="Optimizer states in host memory (ZeRO-Offload)."),
    batch: int = typer.Option(None, "--batch", min=1, help="Inference: concurrent sequences per replica (default: most that fit, ≤ 256)."),
    prompt_len: int = typer.Option(512, "--prompt-len", min=1, help="Inference prompt tokens."),
    output_len: int = typer.Option(128, "--output-len", min=0, help="Inference generated tokens."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV cache: auto (model dtype), fp8 or int8."),
    compare: str = typer.Option(None, "--compare", help="Comma list of hardware: one row each (e.g. h100,h200,mi300x,b200)."),
    top: int = typer.Option(None, "--top", min=1, help="Show the best K layouts."),
    price_per_device_hour: float = typer.Option(None, "--price-per-device-hour", min=0.0, help="Price of a device-hour, for cost."),
    activity_factor: float = typer.Option(0.75, "--activity-factor", min=0.0, max=1.0, help="Power as a fraction of TDP (energy estimate)."),
    target_tokens_per_s: float = typer.Option(None, "--target-tokens-per-s", min=0.0, help="Without --num-devices: also reach this throughput."),
    as_json: bool = JsonOption,
) -> None:
    """Plan a workload: will it fit, on how many devices, in which layout, how fast, at what energy."""
    from accelkit.models import resolve_model
    from accelkit.plan import PlanOptions, resolve_hardware, search_ctx, to_estimate, to_json
    from accelkit.plan import compare as compare_hw
    from accelkit.plan.context import make_context

    with flag_values():
        _choice(task, "--task", _TASKS)
        _choice(recompute, "--recompute", _RECOMPUTE)
        _choice(precision, "--precision", _PRECISIONS)
        _choice(optimizer, "--optimizer", ("adam", "sgd"))
        _choice(kv_dtype, "--kv-dtype", ("auto", "fp8", "int8"))
        names = csv_list(compare, field="--compare")
        if not names and not hardware:
            raise UserError("give --hardware NAME (e.g. h100) or --compare A,B,…")
        spec = resolve_model(model)
        if spec.kind == "vit" or spec.family == "vit":
            seq = spec.num_patches + 1
        else:
            seq = seq_len or min(4096, spec.max_seq_len or 4096)
        if seq_len and spec.max_seq_len and seq_len > spec.max_seq_len:
            err.print(f"note: --seq-len {seq_len} exceeds {spec.name}'s context of {spec.max_seq_len}", highlight=False)
        workload = Workload(
            model=spec, task=task, seq_len=seq, prompt_len=prompt_len, output_len=output_len, optimizer=optimizer,
            batch_size=batch or 1,
            recipe=Recipe(precision=precision, kv_cache_dtype=kv_dtype, offload=offload),
        )
        options = PlanOptions(activity_factor=activity_factor, price_per_device_hour=price_per_device_hour,
                              target_tokens_per_s=target_tokens_per_s)
        fixed: dict[str, Any] = dict(dp=dp, tp=tp, pp=pp, ep=ep, zero=zero, micro_batch=micro_batch,
                                     recompute=recompute, sequence_parallel=sequence_parallel)
    common = dict(fixed=fixed, global_batch=global_batch, batch=batch, num_devices=num_devices)
    if names:
        rows = compare_hw(workload, names, options=options, **common)
        docs = [to_json(c, ctx) for c, ctx in rows]
    else:
        ctx = make_context(workload, Cluster(device=resolve_hardware(hardware), num_devices=num_devices or 1), options)
        found = search_ctx(ctx, top=top or 1, **common)
        rows = [(c, c.extra["context"]) for c in found]
        docs = [to_json(c, ctx) for c, ctx in rows]
    _store([to_estimate(c, ctx) for c, ctx in rows])

    def render() -> None:
        if names or (top and top > 1):
            _render_rows(docs, by_hardware=bool(names))
        else:
            _render_one(docs[0])

    emit(docs if (names or top) else docs[0], as_json, render)


def _store(estimates: list[Any]) -> None:
    from accelkit.results import ResultStore

    try:
        with ResultStore() as store:
            store.add_many(estimates)
    except Exception as exc:  # the plan is still printed; the store is a convenience here
        err.print(f"note: plan not stored ({exc})", highlight=False)


def _layout_str(lay: dict[str, Any]) -> str:
    s = f"dp{lay['dp']} tp{lay['tp']} pp{lay['pp']}"
    if lay["ep"] > 1:
        s += f" ep{lay['ep']}"
    s += f" zero{lay['zero']} mb{lay['micro_batch']}×{lay['grad_accum']} rc={lay['recompute']}"
    return s + (" sp" if lay["sequence_parallel"] else "")


def _money(doc: dict[str, Any]) -> str | None:
    cost = doc.get("cost")
    if not cost or cost.get("per_million_tokens") is None:
        return None
    return f"${cost['per_million_tokens']:,.2f}/M tok"


def _render_rows(docs: list[dict[str, Any]], *, by_hardware: bool) -> None:
    infer = docs[0]["task"] != "train"
    cols = ["hardware", "devices", "layout", "fits", "step s", "tok/s", "tok/s/dev", "MFU", "J/token", "cost",
            "bottleneck"]
    if infer:
        cols[4:5] = ["TTFT s", "decode ms/tok", "max batch"]
    rows = []
    for d in docs:
        n = d["hardware"]["num_devices"]
        tps = d["tokens_per_s"] if d["tokens_per_s"] is not None else d.get("samples_per_s")
        row: list[Any] = [d["hardware"]["name"], n, _layout_str(d["layout"]), "yes" if d["fits"] else "NO"]
        if infer:
            dec = d["decode_time_per_token_s"]
            row += [fmt_num(d["prefill_time_s"], 3), fmt_num(dec * 1e3 if dec else None, 2), d["max_batch"]]
        else:
            row += [fmt_num(d["step_time_s"], 2)]
        row += [fmt_num(tps, 0), fmt_num(tps / n if tps else None, 0), f"{d['mfu']:.3f}",
                fmt_num(d["energy_j_per_token"], 3), _money(d), d["bottleneck"]]
        rows.append(row)
    title = f"{docs[0]['model']['name']} {docs[0]['task']}: " + ("one row per hardware" if by_hardware else "best layouts")
    out.print(table(title, cols, rows, right=tuple(range(1, len(cols) - 2))))
    out.print("energy is ESTIMATED from TDP × activity factor; `--json` lists every assumption")


def _render_one(d: dict[str, Any]) -> None:
    mem = d["memory_per_device_bytes"]
    lay = d["layout"]
    rows: list[tuple[str, Any]] = [
        ("model", f"{d['model']['name']} · {fmt_count(d['model']['params'])} params"
                  + (f" ({fmt_count(d['model']['active_params'])} active)"
                     if d["model"]["active_params"] != d["model"]["params"] else "")),
        ("hardware", f"{d['hardware']['num_devices']} × {d['hardware']['name']}"),
        ("layout", _layout_str(lay)),
        ("fits", "yes" if d["fits"] else f"NO — over by {fmt_bytes(d['overflow']['over_by_bytes'])}; largest: "
                                         f"{', '.join(d['overflow']['largest'])}"),
        ("memory / device", f"{fmt_bytes(mem['total'])} of {fmt_bytes(d['memory_capacity_bytes'])} — "
                            + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in mem.items() if k != "total" and v)),
    ]
    if d["task"] == "train":
        rows += [("step", f"{d['step_time_s']:.3f} s for {d['global_batch']} × {d['seq_len']} tokens")]
    else:
        dec = d["decode_time_per_token_s"]
        rows += [("batch", f"{d['batch']} (max that fits: {d['max_batch']})"),
                 ("prefill (TTFT)", f"{d['prefill_time_s']:.4f} s"),
                 ("decode", f"{dec * 1e3:.3f} ms/token" if dec else "-")]
    tps = d["tokens_per_s"] if d["tokens_per_s"] is not None else d.get("samples_per_s")
    unit = "samples/s" if d["tokens_per_s"] is None else "tokens/s"
    rows += [
        ("throughput", f"{fmt_num(tps, 0)} {unit} ({fmt_num(tps / d['hardware']['num_devices'], 0)} per device)"),
        ("MFU", f"{d['mfu']:.3f}"),
        ("time", ", ".join(f"{k} {v:.3g} s" for k, v in d["time_breakdown_s"].items()) + f" → {d['bottleneck']}"),
        ("energy", f"{d['energy_j_per_token']:.4g} J/token (estimated)" if d["energy_j_per_token"] else "-"),
    ]
    if _money(d):
        rows.append(("cost", _money(d)))
    out.print(table("Plan", ["", ""], rows))
    out.print("assumptions:")
    for a in d["assumptions"]:
        out.print(f"  · {a}", highlight=False)
