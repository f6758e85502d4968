"""`accelkit plan`: memory, FLOPs, time, energy and the parallel layout — for one hardware, or one row
per hardware with --compare. Thin: parse flags → ``accelkit.plan`` → render."""

from __future__ import annotations

import math
from typing import Any

import typer

from accelkit.cli.helptext import examples
from accelkit.cli.output import JsonOption, csv_list, emit, err, flag_values, fmt_num, out, table
from accelkit.cli.spec_options import spec_options
from accelkit.cli.text_to_image import plan as plan_image
from accelkit.core import Cluster, ModelSpec, Recipe, UserError, Workload
from accelkit.core.units import fmt_bytes, fmt_count, parse_size
from accelkit.models import resolve_model
from accelkit.models.diffusion import is_diffusion_model
from accelkit.plan import compare as compare_hw
from accelkit.plan import resolve_hardware, search_ctx, to_estimate, to_json
from accelkit.plan.calibrate import hardware_key
from accelkit.plan.compression import compare_compression
from accelkit.plan.context import make_context
from accelkit.plan.diffusion import ImageRequest
from accelkit.plan.diffusion import to_estimate as image_estimate
from accelkit.plan.fit_hints import would_fit
from accelkit.plan.layout import (
    INFER_ONLY_OPTIONS,
    TRAIN_ONLY_OPTIONS,
    TRAIN_ONLY_REQUEST,
    flag_text,
    refuse_train_only,
)
from accelkit.plan.options import PlanOptions
from accelkit.plan.request import LayoutChoice, PlanRequest
from accelkit.results import ResultStore

#: PlanRequest fields only inference reads (evaluate_infer, infer_memory, infer_time, the inference search): refused
#: with --task train the same way as the planner's INFER_ONLY_OPTIONS; --task infer refuses TRAIN_ONLY_OPTIONS set away
#: from their defaults instead of planning as if they were not there (the library and the diffusion path too)
INFER_ONLY_REQUEST = ("batch", "prompt_len", "output_len", "kv_dtype")


def _refuse_batch_above_cap(request: dict[str, Any], options: dict[str, Any]) -> None:
    """An inference ``--batch`` above ``--max-serving-batch``: the cap was dropped without a word."""
    cap = options.get("max_serving_batch")
    if cap is not None and request.get("batch", 0) > cap:
        raise UserError(f"--batch {request['batch']} is above --max-serving-batch {cap} (the engine's max_num_seqs: "
                        f"no more sequences run at once); use --batch {cap} or less, or raise --max-serving-batch")


def _bytes(text: str) -> int:
    return parse_size(text, field="--overhead")


def _kv_memory(text: str) -> int:
    return parse_size(text, field="--kv-cache-memory")


class _PerHardware(dict[str, float]):
    """Prices by hardware name, shown as the user typed them (an error quoting the flag quotes the text)."""

    text = ""

    def __str__(self) -> str:
        return self.text


def _prices(text: str) -> float | dict[str, float]:
    """'2.5' (every device) or 'h100=2.5,h200=3.1' (per hardware name or alias)."""
    if "=" not in text:
        price = float(text)
        if math.isinf(price):  # past the flag's bounds, as NAME=inf is: it printed $inf and a null JSON cost
            raise UserError(f"--price-per-device-hour {text!r} is not valid; give dollars per device-hour, e.g. 2.5, "
                            "or NAME=DOLLARS per hardware (h100=2.5,h200=3.1)")
        return price
    prices = _PerHardware()
    prices.text = text
    for item in csv_list(text, field="--price-per-device-hour") or []:
        name, _, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = float("nan")
        if not name.strip() or not price >= 0 or price == float("inf"):
            raise UserError(f"--price-per-device-hour {item!r} is not valid; give NAME=DOLLARS per hardware, e.g. "
                            "h100=2.5,h200=3.1, or one number for every device")
        if name.strip().lower() in {key.lower() for key in prices}:  # a dict keeps only the last
            raise UserError(f"--price-per-device-hour {text!r} names {name.strip()} twice; give it one price")
        prices[name.strip()] = price
    return prices


EXAMPLES = examples(
    "accelkit plan --model llama-3.1-70b --task train --hardware h100 --num-devices 64",
    "accelkit plan --model llama-3.1-8b --task infer --hardware h200 --prompt-len 32000 --kv-dtype fp8",
    "accelkit plan --model llama-3.1-70b --task train --compare h100,h200,mi300x,b200",
    "accelkit plan --model path/to/config.json --task infer --hardware cpu --json",
)


@spec_options(PlanOptions, into="options",
              names={"overhead_bytes": "--overhead", "dropout": "--dropout/--no-dropout",
                     "kv_cache_memory_bytes": "--kv-cache-memory"},
              parse={"overhead_bytes": _bytes, "kv_cache_memory_bytes": _kv_memory, "price_per_device_hour": _prices},
              optional=INFER_ONLY_OPTIONS,
              helps={"overhead_bytes": "Framework allowance per device, e.g. 2GiB (context, communicator buffers).",
                     "price_per_device_hour": "Dollars per device-hour, for cost: one number for every device, or "
                                              "NAME=X per hardware (h100=2.5,h200=3.1). --compare without it (or for "
                                              "a device it leaves out): the price catalog's, with offer, source and "
                                              "date under the table.",
                     "max_serving_batch": "Inference without --batch: plan at the largest batch that fits, capped "
                                          "here (vLLM max_num_seqs); default 256.",
                     "prefill_chunk_tokens": "Inference: prefill tokens processed per step (chunked prefill); "
                                             "default 8192.",
                     "max_decode_latency_s": "Inference: the most seconds per decode step (one token per "
                                             "sequence): the search keeps layouts within it (without --num-devices "
                                             "the smallest count that has one) and, without --batch, lowers the "
                                             "batch until decode meets it; a warning when nothing does. Default "
                                             "none.",
                     "kv_cache_memory_bytes": "Inference: the KV budget `accelkit serve --kv-cache-memory` gets, e.g. "
                                              "2GiB, for the KV tokens that fit (kv_cache_capacity); default as the "
                                              "engine: --gpu-memory-utilization of what the weights leave, 1 GiB on "
                                              "a CPU.",
                     "gpu_memory_utilization": "Inference without --kv-cache-memory: the engine's fraction of the "
                                               "memory left after the weights and --overhead that becomes KV cache "
                                               "(as `accelkit serve`); default 0.9.",
                     "block_size": "Inference: tokens per KV block (as `accelkit serve --block-size`); default 16.",
                     "kv_cache_scales": "Inference, fp8/int8 KV: per-token-head (accelkit serve: a float16 scale "
                                        "per token and KV head, head_dim + 2 bytes) or per-tensor (vLLM, "
                                        "TensorRT-LLM: 1 byte per element); default per-token-head."})
@spec_options(ImageRequest, into="image", optional=tuple(ImageRequest.__dataclass_fields__))
@spec_options(LayoutChoice, into="layout",
              names={"sequence_parallel": "--sequence-parallel/--no-sequence-parallel"})
@spec_options(PlanRequest, into="request", optional=TRAIN_ONLY_REQUEST + INFER_ONLY_REQUEST,
              helps={"batch": "Inference: concurrent sequences per replica; default the most that fit, ≤ 256.",
                     "prompt_len": "Inference prompt tokens; default 512.",
                     "output_len": "Inference generated tokens; default 128.",
                     "kv_dtype": "Inference KV cache: auto (the --precision's activation dtype: bf16 at fp8), fp8 or int8; default auto.",
                     "optimizer": "Training: adam or sgd (with momentum); default adam.",
                     "offload": "Training: optimizer states in host memory (ZeRO-Offload); default off.",
                     "grad_compression": "Training: data-parallel gradient compression, default none: bf16/fp16 (2 B "
                                         "per element: DDP compress hook, FSDP2 reduce_dtype) or powersgd (rank-r P "
                                         "and Q per gradient matrix; DDP, zero 0)."})
def plan_cmd(
    model: str = typer.Option(..., "--model", help="Preset name or a Hugging Face config.json path."),
    as_json: bool = JsonOption,
    *,
    request: dict[str, Any],
    layout: dict[str, Any],
    options: dict[str, Any],
    image: dict[str, Any],
) -> None:
    """Plan a workload: will it fit, on how many devices, in which layout, how fast, at what energy."""
    if is_diffusion_model(model):  # a text-to-image pipeline: its own plan (one pipeline per device, images/s)
        with flag_values():
            docs = plan_image(model, request, layout, options, image, as_json=as_json)
        _store([image_estimate(d) for d in docs])
        return
    if image:
        key, value = next(iter(image.items()))
        raise UserError(f"{flag_text(key, value)} applies to text-to-image models (sd3-medium, flux-dev, sdxl-base); "
                        f"{model} is not one — drop it")
    with flag_values():
        if request.get("task") == "infer":
            # the training-only flags (TRAIN_ONLY_REQUEST) default to None, so one given even at its default value is
            # refused; the library (make_context) refuses a workload that sets one away from its default, in these words
            refuse_train_only(request, TRAIN_ONLY_REQUEST)
            defaults = PlanOptions()  # the option flags arrive with their defaults: one set away from it was given
            refuse_train_only({k: options[k] for k in TRAIN_ONLY_OPTIONS
                               if k in options and options[k] != getattr(defaults, k)}, TRAIN_ONLY_OPTIONS)
            _refuse_batch_above_cap(request, options)
        else:
            _refuse_inference_flags(request, options)
        prices = options.pop("price_per_device_hour", None)
        if isinstance(prices, float):  # one price for every device, as before
            options["price_per_device_hour"], prices = prices, None
        req = PlanRequest(**request)
        choice = LayoutChoice(**layout)
        plan_options = PlanOptions(**options)
        names = csv_list(req.compare, field="--compare")
        if req.compare is not None and not names:  # it planned hardware 'None' (found in review)
            raise UserError(f"--compare {req.compare!r} names no hardware; give a comma list, e.g. h100,h200")
        workload, notes = _workload(model, req, request, names, options)
    common: dict[str, Any] = dict(fixed=choice.fixed(), global_batch=req.global_batch, batch=req.batch,
                                  num_devices=req.num_devices)
    top = req.top
    if names:
        rows = compare_hw(workload, names, options=plan_options,
                          scaleout_bandwidth_bytes_per_s=req.scaleout_bandwidth_bytes_per_s,
                          basis=req.compare_basis or "devices", prices=prices, budget_per_hour=req.budget_per_hour,
                          **common)
    else:
        rows, plan_options = _search_one(workload, req, plan_options, prices, common)
        if req.compare_compression:
            _compare_compression(workload, rows[0], plan_options, req.powersgd_rank, as_json, notes)
            return
    # (each with the notes printed on stderr: a --json reader saw the context note nowhere)
    docs = [{**to_json(c, ctx), "notes": [note.removeprefix("note: ") for note in notes]} for c, ctx in rows]
    if not names and not docs[0]["fits"]:  # say what would fit: --offload, the smallest count
        docs[0]["overflow"]["would_fit"] = would_fit(rows[0][1], fixed=common["fixed"],
                                                     global_batch=req.global_batch, batch=req.batch)
    _store([to_estimate(c, ctx) for c, ctx in rows])
    for note in notes:  # after the plan: a refusal of the same command is its one error line, with no note before it
        err.print(note, highlight=False)
    for warning in dict.fromkeys(w for doc in docs for w in doc["warnings"]):  # once each, in order
        err.print(f"warning: {warning}", highlight=False)

    def render() -> None:
        if names or (top and top > 1):
            _render_rows(docs, by_hardware=bool(names))
            if not names and top and len(docs) < top:  # --top 5 printed one row without saying why
                hw = docs[0]["hardware"]
                out.print(f"--top {top}: {len(docs)} layout{'s' if len(docs) > 1 else ''} on {hw['num_devices']} × "
                          f"{hw['name']} — all there are", highlight=False)
        else:
            _render_one(docs[0])

    emit(docs if (names or top) else docs[0], as_json, render)


def _workload(model: str, req: PlanRequest, request: dict[str, Any], names: list[str] | None,
              options: dict[str, Any]) -> tuple[Workload, list[str]]:
    """The planner's workload from the flags (a flag the model cannot take is an error; a length past its context
    is one when the positions are learned, a note otherwise), and the notes to print once the plan is made."""
    spec = resolve_model(model)
    if req.seq_len is not None:
        _check_seq_len(spec, req)
    if req.task == "infer":
        _check_kv_flags(spec, request, options)
    decoder_only = [k for k in ("prompt_len", "output_len") if k in request]
    if req.task == "infer" and spec.kind not in ("decoder", "moe") and decoder_only:
        key = decoder_only[0]
        takes = ("a fixed number of patches" if spec.family == "vit" else
                 "its input length from --seq-len" if spec.kind == "encoder" else "one image per batch element")
        what = "a CNN" if spec.kind == "cnn" else f"an {spec.kind} model"
        raise UserError(f"{flag_text(key, request[key])} applies to decoder models (a prompt, then generated "
                        f"tokens); {spec.name} is {what} and takes {takes} — drop it")
    if spec.family == "vit":
        seq = spec.num_patches + 1
    else:
        seq = req.seq_len or min(4096, spec.max_seq_len or 4096)
    if req.hardware and names:
        raise UserError(f"--hardware {req.hardware} and --compare {req.compare} are exclusive (one plan, or one row "
                        f"per hardware); drop --hardware, or add {req.hardware} to the --compare list")
    notes = _check_context(spec, req)
    return Workload(
        model=spec, task=req.task, seq_len=seq, prompt_len=req.prompt_len, output_len=req.output_len,
        optimizer=req.optimizer, batch_size=req.batch or 1,
        recipe=Recipe(precision=req.precision, kv_cache_dtype=req.kv_dtype, offload=req.offload,
                      grad_compression=req.grad_compression,
                      powersgd_rank=req.powersgd_rank if req.grad_compression == "powersgd" else 4),
    ), notes


def _check_seq_len(spec: ModelSpec, req: PlanRequest) -> None:
    """--seq-len where the model takes no such length — a decoder's inference (its lengths are --prompt-len and
    --output-len), a ViT (its patches) or a CNN (an image) — is an error, not a flag planned as if not given
    (`--task infer --seq-len 32768` planned 512-token prompts; a CNN's default batch was 4 Mi ÷ --seq-len images)."""
    if spec.kind == "cnn":
        raise UserError(f"--seq-len {req.seq_len} applies to transformers; {spec.name} is a CNN (one image per batch "
                        "element) — drop it")
    if spec.family == "vit":
        raise UserError(f"--seq-len {req.seq_len} does not apply to {spec.name}: a ViT's sequence is its "
                        f"{spec.num_patches} patches and the class token ({spec.num_patches + 1}) — drop it")
    if req.task == "infer" and spec.kind in ("decoder", "moe"):
        raise UserError(f"--seq-len {req.seq_len} is the training sequence length; {spec.name}'s inference takes "
                        f"--prompt-len and --output-len (prompt and generated tokens per sequence) — use those")


#: inference flags that size or schedule a decoder's KV cache and decode steps: an encoder, a ViT or a CNN has neither
KV_FLAGS = ("kv_dtype", "kv_cache_memory_bytes", "gpu_memory_utilization", "block_size", "kv_cache_scales",
            "inflight_batching")


def _check_kv_flags(spec: ModelSpec, request: dict[str, Any], options: dict[str, Any]) -> None:
    """A KV-cache flag the plan cannot read is an error, not planned as if not given: any of them for a model without a
    decoder's KV cache (bert-base planned the same with --kv-dtype fp8 or --kv-cache-memory 1GiB), --kv-cache-scales
    for a cache without scales (--kv-dtype auto: the model dtype)."""
    given = {**{k: request[k] for k in ("kv_dtype",) if k in request},
             **{k: options[k] for k in KV_FLAGS if k in options}}
    if spec.kind not in ("decoder", "moe"):
        for key in KV_FLAGS:
            if key in given:
                what = "a CNN" if spec.kind == "cnn" else f"an {spec.kind} model"
                value = fmt_bytes(given[key]) if key == "kv_cache_memory_bytes" else given[key]
                raise UserError(f"{flag_text(key, value)} applies to a decoder's KV cache and decode steps; "
                                f"{spec.name} is {what} and has neither — drop it")
    if "kv_cache_scales" in given and request.get("kv_dtype", "auto") not in ("fp8", "int8"):
        raise UserError(f"--kv-cache-scales {given['kv_cache_scales']} says where an fp8 or int8 KV cache keeps its "
                        f"scales; --kv-dtype {request.get('kv_dtype', 'auto')} keeps the model dtype, with none — add "
                        "--kv-dtype fp8 (or int8), or drop it")


def _check_context(spec: ModelSpec, req: PlanRequest) -> list[str]:
    """A sequence (train) or prompt + output (infer) past the model's context: an error when its positions are a
    learned table (max_seq_len rows: no position past it exists), a note when rotary (returned, for the caller to
    print once the plan is made). A ViT takes its sequence from its patches, not --seq-len."""
    notes = []
    learned = spec.position == "learned" and spec.is_transformer and spec.family != "vit"
    if req.seq_len and spec.max_seq_len and req.seq_len > spec.max_seq_len:
        if learned:
            raise UserError(f"--seq-len {req.seq_len} exceeds the {spec.max_seq_len} learned positions of "
                            f"{spec.name} (its position-embedding table has {spec.max_seq_len} rows); use "
                            f"--seq-len {spec.max_seq_len} or less")
        notes.append(f"note: --seq-len {req.seq_len} exceeds {spec.name}'s context of {spec.max_seq_len}")
    context = req.prompt_len + req.output_len
    if req.task == "infer" and spec.kind in ("decoder", "moe") and spec.max_seq_len and context > spec.max_seq_len:
        if learned:
            raise UserError(f"--prompt-len {req.prompt_len} + --output-len {req.output_len} = {context} tokens "
                            f"exceeds the {spec.max_seq_len} learned positions of {spec.name} (its position-"
                            f"embedding table has {spec.max_seq_len} rows); shorten them")
        notes.append(f"note: --prompt-len {req.prompt_len} + --output-len {req.output_len} = {context} tokens "
                     f"exceeds {spec.name}'s context of {spec.max_seq_len}")
    return notes


def _search_one(workload: Workload, req: PlanRequest, options: PlanOptions, prices: dict[str, float] | None,
                common: dict[str, Any]) -> tuple[list[tuple[Any, Any]], PlanOptions]:
    """The best layouts (``--top``, default 1) on the one --hardware: (candidate, its context) rows, and the options
    planned with (a NAME=X price taken for that hardware)."""
    cluster = Cluster(device=resolve_hardware(str(req.hardware)), num_devices=req.num_devices or 1)
    if req.scaleout_bandwidth_bytes_per_s is not None:
        cluster = cluster.replace(scaleout_bandwidth_bytes_per_s=req.scaleout_bandwidth_bytes_per_s)
    if prices:  # NAME=X for the one hardware planned
        options = options.replace(price_per_device_hour=_own_price(prices, cluster.device.name))
    ctx = make_context(workload, cluster, options)
    found = search_ctx(ctx, top=req.top or 1, **common)
    return [(c, c.extra["context"]) for c in found], options


def _own_price(prices: dict[str, float], device_name: str) -> float:
    """The price NAME=X gives the one --hardware planned; a name that is not it is an error, not ignored."""
    own, own_name = None, ""
    for name, price in prices.items():
        if resolve_hardware(name).name != device_name:
            raise UserError(f"--price-per-device-hour names {name}, which is not --hardware {device_name}; drop it, or "
                            "give one number")
        if own is not None:  # h100=2.5,h100-sxm5=3: the first was dropped without a word
            raise UserError(f"--price-per-device-hour prices {device_name} twice ({own_name} and {name}); give it one "
                            "price")
        own, own_name = price, name
    assert own is not None
    return own


def _refuse_inference_flags(request: dict[str, Any], options: dict[str, Any]) -> None:
    """--task train (the default) with a flag only inference reads: one error naming it instead of ignoring it."""
    if "batch" in request:
        raise UserError(f"--batch {request['batch']} applies to --task infer (concurrent sequences per replica); for "
                        "training give --global-batch (sequences per step)")
    flags = [(k, request[k]) for k in INFER_ONLY_REQUEST if k in request]
    flags += [(k, options[k]) for k in INFER_ONLY_OPTIONS if k in options]
    if flags:
        key, value = flags[0]
        raise UserError(f"{flag_text(key, value)} applies to --task infer; training does not model it — drop it, or "
                        "add --task infer")


def _compare_compression(workload: Workload, best: tuple[Any, Any], options: PlanOptions, rank: int,
                         as_json: bool, notes: list[str]) -> None:
    candidate, ctx = best
    with flag_values():
        doc = compare_compression(workload, ctx.cluster, candidate.layout, options, powersgd_rank=rank)
    for note in notes:
        err.print(note, highlight=False)

    def fits(r: dict[str, Any]) -> str:
        """'yes', or 'NO: 142.9 GiB > 80 GiB' — a layout that does not fit is shown as such, not only in --json."""
        if r["fits"]:
            return "yes"
        return f"NO: {fmt_bytes(r['memory_total_bytes'])} > {fmt_bytes(r['memory_capacity_bytes'])}"

    def render() -> None:
        rows = []
        for r in doc["rows"]:
            if "refused" in r:
                rows.append([r["compression"], None, None, None, None, None, None, None, r["refused"]])
                continue
            rows.append([r["compression"], fits(r), fmt_num(r["step_time_s"], 3), f"{r['step_vs_none']:.3f}",
                         fmt_bytes(r["buffer_bytes_per_step"]),
                         None if r["bytes_vs_none"] is None else f"{r['bytes_vs_none']:.3f}",
                         fmt_num(r["collective_s"], 3), fmt_num(r["compress_s"], 3), r.get("note")])
        gbps = doc["scaleout_bandwidth_bytes_per_s"] * 8 / 1e9
        title = (f"{doc['model']} on {doc['num_devices']}×{doc['hardware']} ({doc['num_nodes']} node(s), {gbps:g} Gb/s "
                 f"scale-out), {_layout_str(doc['layout'])}")
        out.print(table(title, ["compression", "fits", "step s", "× none", "grad bytes/step/rank", "× none",
                                "collective s", "compress s", "note"], rows, right=(2, 3, 4, 5, 6, 7)))
        timed = [r for r in doc["rows"] if "fits" in r]
        if unfit := [r["compression"] for r in timed if not r["fits"]]:
            which = "none of the layouts fits" if len(unfit) == len(timed) else f"{', '.join(unfit)} do(es) not fit"
            out.print(f"⚠ {which} in the device's memory (the fits column: per-device total > capacity): the step "
                      "times are what the layout would take if it fit; --zero, --tp/--pp, --recompute or more devices "
                      "make room (`accelkit plan` without the layout flags finds one)", highlight=False)
        out.print(doc["verdict"], highlight=False)
        out.print("collective s: the gradient collectives' own time (partly hidden behind the backward); "
                  "`--json` has every figure", highlight=False)

    emit(doc, as_json, render)


def _store(estimates: list[Any]) -> None:
    try:
        with ResultStore() as store:
            store.add_many(estimates)
    except Exception as exc:  # the plan is still printed; the store is a convenience here
        err.print(f"note: plan not stored ({exc})", highlight=False)


def _layout_str(lay: dict[str, Any]) -> str:
    s = f"dp{lay['dp']} tp{lay['tp']} pp{lay['pp']}"
    for key in ("cp", "vp", "ep"):
        if lay.get(key, 1) > 1:
            s += f" {key}{lay[key]}"
    s += f" zero{lay['zero']} mb{lay['micro_batch']}×{lay['grad_accum']} rc={lay['recompute']}"
    if lay.get("recompute_every", 1) > 1:  # every n-th block checkpointed
        s += f"/{lay['recompute_every']}"
    if (lay.get("shard_group") or lay["dp"]) < lay["dp"]:  # hybrid sharding
        s += f" shard{lay['shard_group']}"
    return s + (" sp" if lay["sequence_parallel"] else "")


def _kv_capacity_rows(d: dict[str, Any]) -> list[tuple[str, Any]]:
    cap = d.get("kv_cache_capacity")
    if not cap:
        return []
    context = d["prompt_len"] + d["output_len"]
    return [("KV capacity", f"{cap['num_tokens']:,} tokens ({cap['num_blocks']:,} blocks × {cap['block_size']}) in "
                            f"{fmt_bytes(cap['budget_bytes'])} at {cap['bytes_per_token']:,} B/token: "
                            f"{cap['num_seqs_at_context']:,} sequences of {context:,} tokens (accelkit serve)")]


def _budget_note(d: dict[str, Any]) -> str:
    """A --kv-cache-memory budget above the batch's KV: the engine holds all of it (what ``fits`` counts)."""
    cap = d.get("kv_cache_capacity") or {}
    if cap.get("budget_source") != "kv_cache_memory_bytes" or cap["budget_bytes"] <= d["memory_per_device_bytes"][
            "kv_cache"]:
        return ""
    return f"; the engine allocates the whole {fmt_bytes(cap['budget_bytes'])} KV budget up front (fits counts it)"


def _money(doc: dict[str, Any]) -> str | None:
    cost = doc.get("cost")
    if not cost:
        return None
    if cost.get("per_million_samples") is not None:  # a CNN: per image
        return f"${cost['per_million_samples']:,.2f}/M samples"
    if cost.get("per_million_tokens") is None:
        return None
    return f"${cost['per_million_tokens']:,.2f}/M tok"


def _energy(d: dict[str, Any]) -> float | None:
    """J per item: per token, or per sample for a CNN (its energy_j_per_token is null)."""
    return d["energy_j_per_token"] if d["energy_j_per_token"] is not None else d.get("energy_j_per_sample")


def _assumed(d: dict[str, Any]) -> str | None:
    """The efficiencies a plan ASSUMES for this device (no published or measured figure), in words; None when none."""
    assumed = d.get("assumed_efficiency") or {}
    # the serving fraction to the 3 places its assumption line gives (0.545), the kernel efficiencies to 2
    return ", ".join(f"{k.replace('_', ' ')} {v:.{3 if k == 'serving_attained' else 2}f}"
                     for k, v in assumed.items()) or None


def _price_note(d: dict[str, Any]) -> str | None:
    cost = d.get("cost")
    if not cost:
        return None
    source = cost.get("price_source") or "given"
    return f"${cost['price_per_device_hour']:g}/device-hour" + (
        " (--price-per-device-hour)" if source == "given" else f" — price {source}")


def _render_rows(docs: list[dict[str, Any]], *, by_hardware: bool) -> None:
    infer = docs[0]["task"] != "train"
    cols = ["hardware", "devices", "layout", "fits", "step s", "tok/s", "tok/s/dev", "MFU", "J/token", "cost",
            "bottleneck"]
    if docs[0]["tokens_per_s"] is None and docs[0].get("samples_per_s") is not None:  # a CNN counts images
        cols[5:9] = ["samples/s", "samples/s/dev", "MFU", "J/sample"]
    if infer and _one_pass(docs[0]):  # a CNN or an encoder: one forward per batch, no prefill and no decode
        cols[4:5] = ["batch s", "batch", "max batch"]
    elif infer:
        cols[4:5] = ["prefill s", "decode ms/tok", "max batch"]  # prefill of the whole batch, not one request
    rows = [_row(d, infer=infer, by_hardware=by_hardware) for d in docs]
    title = f"{docs[0]['model']['name']} {docs[0]['task']}: " + ("one row per hardware" if by_hardware else "best layouts")
    out.print(table(title, cols, rows, right=tuple(range(1, len(cols) - 2))))
    if by_hardware and docs[0].get("compare_basis"):
        out.print(f"basis: {docs[0]['compare_basis']}", highlight=False)
    _render_row_notes(docs, by_hardware=by_hardware)
    out.print("energy is ESTIMATED from TDP × activity factor; `--json` lists every assumption")


def _one_pass(d: dict[str, Any]) -> bool:
    """An inference plan of a model that runs one forward pass per batch — a CNN (it counts samples) or an encoder (its
    input tokens) — whose time is the batch's, with no prefill or decode to speak of (a decoder's prefill-only run
    still prefills)."""
    return d["task"] != "train" and d.get("tokens_counted") in (None, "input")


def _row(d: dict[str, Any], *, infer: bool, by_hardware: bool) -> list[Any]:
    """One plan's row of the table (inference: prefill, decode and max batch in place of the step)."""
    n = d["hardware"]["num_devices"]
    tps = d["tokens_per_s"] if d["tokens_per_s"] is not None else d.get("samples_per_s")
    row: list[Any] = [d["hardware"]["name"], n, _layout_str(d["layout"]), "yes" if d["fits"] else "NO"]
    if infer and _one_pass(d):
        row += [fmt_num(d["prefill_time_s"], 3), d["batch"], d["max_batch"]]
    elif infer:
        dec = d["decode_time_per_token_s"]
        row += [fmt_num(d["prefill_time_s"], 3), fmt_num(dec * 1e3 if dec else None, 2), d["max_batch"]]
    else:
        row += [fmt_num(d["step_time_s"], 2)]
    row += [fmt_num(tps, 0), fmt_num(tps / n if tps else None, 0),
            f"{d['mfu']:.3f}" + ("*" if _assumed(d) else ""),  # * = rests on an assumed efficiency (footnote)
            fmt_num(_energy(d), 3), _money(d) or ("no price" if by_hardware else None), d["bottleneck"]]
    return row


def _render_row_notes(docs: list[dict[str, Any]], *, by_hardware: bool) -> None:
    """Under the table: the assumed efficiencies (the rows' *), the prices, and the hardware with none."""
    shown = docs if by_hardware else docs[:1]  # --top: one hardware, the same figures on every row
    for d in shown:
        if (assumed := _assumed(d)) is not None:
            out.print(f"* {d['hardware']['name']}: efficiency ASSUMED (no published or measured figure): {assumed} "
                      "— `--json` assumptions say why", highlight=False)
    notes = {d["hardware"]["name"]: note for d in shown if (note := _price_note(d)) is not None}
    if len(shown) > 1 and len(notes) == len(shown) and len(set(notes.values())) == 1:
        out.print(f"price: {next(iter(notes.values()))} for every device", highlight=False)
    else:
        for name, note in notes.items():
            out.print(f"price {name}: {note}", highlight=False)
    unpriced = [d["hardware"]["name"] for d in docs if not d.get("cost")] if by_hardware else []
    if unpriced:
        out.print(f"no price: the price catalog has none for {', '.join(unpriced)}; give --price-per-device-hour "
                  f"{','.join(hardware_key(name) + '=X' for name in unpriced)}", highlight=False)


def _would_fit(hints: list[str] | None) -> str:
    if hints is None:
        return ""
    return ("; would fit: " + "; or ".join(hints)) if hints else "; no device count up to --max-devices fits"


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
                                         f"{', '.join(d['overflow']['largest'])}"
                                         + _would_fit(d['overflow'].get('would_fit'))),
        ("memory / device", f"{fmt_bytes(mem['total'])} of {fmt_bytes(d['memory_capacity_bytes'])} — "
                            + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in mem.items() if k != "total" and v)
                            + _budget_note(d)),
    ]
    if d.get("host_memory_bytes"):  # --offload: what each rank keeps in host memory
        rows.append(("host memory / rank", ", ".join(f"{k} {fmt_bytes(v)}" for k, v in d["host_memory_bytes"].items())
                     + " (a node's host holds this for each of its ranks)"))
    if d["task"] == "train":
        items = (f"{d['global_batch']} × {d['seq_len']} tokens" if d["tokens_per_s"] is not None
                 else f"{d['global_batch']} samples")  # a CNN: images, no sequence
        rows += [("step", f"{fmt_num(d['step_time_s'], 3)} s for {items}")]
    elif _one_pass(d):  # one forward pass per batch: its time, not a prefill and an empty decode
        items = ("sample" if d["tokens_per_s"] is None else "sequence") + ("s" if d["batch"] != 1 else "")
        rows += [("batch", f"{d['batch']} (max that fits: {d['max_batch']})"),
                 ("latency", f"{d['prefill_time_s'] * 1e3:.4g} ms per batch of {d['batch']} {items} (one forward pass)")]
    else:
        dec = d["decode_time_per_token_s"]
        rows += [("batch", f"{d['batch']} (max that fits: {d['max_batch']})"
                           + (f", KV cache {d['kv_cache_dtype']}" if d.get("kv_cache_dtype") else "")),
                 *_kv_capacity_rows(d),
                 ("prefill", f"{fmt_num(d['prefill_time_s'], 4)} s for the whole batch"
                             + (f" ({d['batch']} × {d['prompt_len']} tokens: a request's TTFT when all arrive at once)"
                                if d.get("prompt_len") else "")),
                 ("decode", f"{fmt_num(dec * 1e3, 3)} ms/token" if dec else "-")]
    tps = d["tokens_per_s"] if d["tokens_per_s"] is not None else d.get("samples_per_s")
    unit = "samples/s" if d["tokens_per_s"] is None else "tokens/s"
    rows += [
        ("throughput", f"{fmt_num(tps, 0)} {unit} ({fmt_num(tps / d['hardware']['num_devices'], 0)} per device)"),
        ("MFU", f"{d['mfu']:.3f}" + (f" (efficiency ASSUMED: {assumed}; see assumptions)"
                                      if (assumed := _assumed(d)) else "")),
        ("time", ", ".join(f"{k} {v:.3g} s" for k, v in d["time_breakdown_s"].items()) + f" → {d['bottleneck']}"),
        ("energy", f"{_energy(d):.4g} J/{'token' if d['tokens_per_s'] is not None else 'sample'} (estimated)"
                   if _energy(d) is not None else "-"),
    ]
    if _money(d):
        rows.append(("cost", f"{_money(d)} at {_price_note(d)}"))
    out.print(table("Plan", ["", ""], rows))
    out.print("assumptions:")
    for a in d["assumptions"]:
        out.print(f"  · {a}", highlight=False)
