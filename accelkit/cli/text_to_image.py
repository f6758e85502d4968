"""The text-to-image side of `accelkit models show|list` and `accelkit plan`: a DiffusionSpec's document and table,
and the plan of a pipeline per hardware. Thin: the library (``accelkit.models.diffusion``, ``accelkit.plan.diffusion``)
does the arithmetic; this renders it. No torch."""

from __future__ import annotations

from typing import Any

from accelkit.cli.output import emit, fmt_num, out, table
from accelkit.core import UnknownNameError, UserError
from accelkit.core.units import fmt_bytes, fmt_count
from accelkit.hardware import get_device
from accelkit.models.diffusion import DiffusionSpec, default_generation, pipeline_count, resolve_diffusion
from accelkit.models.diffusion.pipeline import check_generation
from accelkit.models.diffusion.spec import DENOISER_CLASS, PIPELINE_CLASS
from accelkit.models.diffusion.unet import per_block
from accelkit.plan.calibrate import LOCAL_NAMES
from accelkit.plan.diffusion import compare_image
from accelkit.plan.layout import TRAIN_ONLY_REQUEST, flag_text
from accelkit.plan.options import PlanOptions
from accelkit.plan.request import PlanRequest


def spec_json(spec: DiffusionSpec) -> dict[str, Any]:
    """The spec, its parameters per component and its FLOPs at the default generation settings."""
    gen = default_generation(spec)
    count = pipeline_count(spec, gen)
    return {
        **spec.to_dict(), "kind": "diffusion", "pipeline": PIPELINE_CLASS[spec.family],
        "denoiser_class": DENOISER_CLASS[spec.family], "params": count.total_params,
        "params_by_component": dict(count.params), "default_generation": gen.to_dict(),
        "flops_per_image": count.image_flops, "flops_per_step": count.step_flops,
        "flops_per_image_by_phase": {"text_encoders": count.text_flops, "denoiser": count.denoise_flops,
                                     "vae_decode": count.vae_flops},
    }


def _denoiser_shape(spec: DiffusionSpec) -> str:
    d = spec.denoiser
    if spec.family == "sdxl":
        # an int for every level, diffusers' default type, or a list (an int was an internal error; found in review)
        depth = per_block(d.get("transformer_layers_per_block", 1), len(d["block_out_channels"]))
        return f"UNet {'-'.join(map(str, d['block_out_channels']))} ch, transformer layers {'/'.join(map(str, depth))}"
    heads = f"{d['num_attention_heads']}×{d['attention_head_dim']}"
    if spec.family == "flux":
        return f"{d['num_layers']} double + {d['num_single_layers']} single blocks, heads {heads}"
    return f"{d['num_layers']} joint blocks, heads {heads}, patch {d.get('patch_size', 2)}"


def list_rows(specs: list[DiffusionSpec]) -> list[tuple[Any, ...]]:
    rows = []
    for s in specs:
        count = pipeline_count(s, default_generation(s))
        rows.append((s.name, "diffusion", s.family, fmt_count(count.total_params),
                     fmt_count(count.params["denoiser"]), _denoiser_shape(s)))
    return rows


def show(spec: DiffusionSpec, as_json: bool) -> None:
    """`accelkit models show` of a text-to-image model."""
    data = spec_json(spec)
    gen = data["default_generation"]

    def render() -> None:
        params = data["params_by_component"]
        rows: list[tuple[str, Any]] = [
            ("pipeline", f"{data['pipeline']} ({spec.family})"),
            ("params", f"{data['params']:,} ({fmt_count(data['params'])})"),
            ("denoiser", f"{data['denoiser_class']}: {params['denoiser']:,} — {_denoiser_shape(spec)}"),
            ("text encoders", f"{params['text_encoders']:,}: " + ", ".join(
                f"{e.kind} h{e.config.get('hidden_size', e.config.get('d_model'))} ×{e.max_length} tokens"
                for e in spec.text_encoders) + (f"; no T5 (the MMDiT gets {spec.max_sequence_length} zero tokens "
                                                "in its place)" if spec.max_sequence_length else "")),
            ("vae", f"{params['vae']:,}: latent {spec.vae['latent_channels']} ch, {spec.vae_scale_factor}× down"),
            ("default", f"{gen['width']}×{gen['height']}, {gen['steps']} steps, guidance {gen['guidance']:g}"
                        + (" (CFG)" if spec.uses_cfg(gen["guidance"]) else "")),
            ("FLOPs / image", f"{fmt_count(data['flops_per_image'])} — text {fmt_count(data['flops_per_image_by_phase']['text_encoders'])}, "
                              f"denoiser {fmt_count(data['flops_per_image_by_phase']['denoiser'])}, VAE decode "
                              f"{fmt_count(data['flops_per_image_by_phase']['vae_decode'])}"),
            ("FLOPs / step", f"{fmt_count(data['flops_per_step'])} per image"
                             + (" (both CFG halves)" if spec.uses_cfg(gen["guidance"]) else "")),
            ("source", spec.source),
        ]
        out.print(table(spec.name, ["field", "value"], rows))

    emit(data, as_json, render)


def _time(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1 else f"{seconds * 1e3:.3g} ms"


def _joules(j: float | None) -> str:
    """J/image: whole joules from 100 up (12,560, not 1.256e+04), three figures below (a tiny model's 0.000151, not
    0: found in review)."""
    return "-" if j is None else f"{j:,.0f}" if j >= 100 else f"{j:.3g}"


def render_plans(docs: list[dict[str, Any]], *, compare: bool) -> None:
    """One row per hardware (``compare``), or the one plan in detail; the assumptions under it."""
    first = docs[0]
    g = first["generation"]
    shape = (f"{first['model']['name']} {g['width']}×{g['height']}, {g['steps']} steps, guidance {g['guidance']:g}"
             f"{' (CFG)' if g['cfg'] else ''}, batch {g['batch_size']}, {first['precision']}")
    if compare:
        rows = []
        for d in docs:
            mem = d["memory_per_device_bytes"]
            rows.append([d["hardware"]["name"], "yes" if d["fits"] else "NO", fmt_bytes(mem["total"]),
                         _time(d["time_per_image_s"]), fmt_num(d["images_per_s_per_device"], 3),
                         fmt_num(d["images_per_s"], 3), f"{d['mfu']:.3f}",
                         _joules(d["energy_j_per_image"]), d["bottleneck"]])
        out.print(table(f"{shape}: one row per hardware",
                        ["hardware", "fits", "memory/dev", "s/image", "images/s/dev", "images/s", "MFU",
                         "J/image", "slowest phase"], rows, right=(2, 3, 4, 5, 6, 7)))
    else:
        d = first
        mem = d["memory_per_device_bytes"]
        by = d["time_breakdown_s"]
        rows2: list[tuple[str, Any]] = [
            ("hardware", f"{d['hardware']['num_devices']} × {d['hardware']['name']} (one pipeline per device)"),
            ("fits", "yes" if d["fits"] else "NO"),
            ("memory / device", f"{fmt_bytes(mem['total'])} of {fmt_bytes(d['memory_capacity_bytes'])} — weights "
                                f"{fmt_bytes(mem['weights'])}, activations {fmt_bytes(mem['activations'])}, overhead "
                                f"{fmt_bytes(mem['overhead'])}"),
            ("FLOPs", f"{fmt_count(d['flops_per_image'])} per image, {fmt_count(d['flops_per_step'])} per step"),
            # the phases are one call's; with --batch above 1 a call is that many images (its phases read as one
            # image's put the denoiser alone above the time per image; found in review)
            ("time / image", f"{_time(d['time_per_image_s'])} — "
                             + (f"a call of {g['batch_size']} images {_time(d['generate_time_s'])}: "
                                if g["batch_size"] > 1 else "")
                             + f"text {_time(by['text_encoders'])}, denoiser {_time(by['denoiser'])} "
                             f"({_time(d['step_time_s'])}/step), VAE {_time(by['vae_decode'])}"),
            ("images/s", f"{fmt_num(d['images_per_s'], 3)} ({fmt_num(d['images_per_s_per_device'], 3)} per device)"),
            ("MFU", f"{d['mfu']:.3f}"),
            ("energy", "-" if d["energy_j_per_image"] is None else f"{_joules(d['energy_j_per_image'])} J/image "
                                                                  "(estimated)"),
            ("bottleneck", d["bottleneck"]),
        ]
        out.print(table(f"Plan: {shape}", ["", ""], rows2))
    for d in docs:  # a plan that does not fit says what to change (the documents held it unprinted; found in review)
        for w in d.get("warnings", []):
            out.print(f"warning: {w}", highlight=False)
    out.print("energy is ESTIMATED from TDP × activity factor; assumptions:")
    common = [a for a in first["assumptions"] if all(a in d["assumptions"] for d in docs)]
    for a in common:
        out.print(f"  · {a}", highlight=False)
    for d in docs:  # each device's own peaks and efficiencies
        for a in d["assumptions"]:
            if a not in common:
                out.print(f"  · {d['hardware']['name']}: {a}", highlight=False)


#: `accelkit plan` flags a text-to-image plan does not read (request fields, then every layout field)
_NOT_FOR_IMAGES = ("seq_len", "global_batch", "prompt_len", "output_len", "kv_dtype", "optimizer", "offload",
                   "grad_compression", "powersgd_rank", "compare_compression", "top", "scaleout_gbps", "compare_basis",
                   "budget_per_hour")
#: PlanOptions a text-to-image plan reads; the others are refused when changed from their defaults
_IMAGE_OPTIONS = ("activity_factor", "overhead_bytes", "use_calibration")


def _refuse_flags(model: str, request: dict[str, Any], layout: dict[str, Any], options: dict[str, Any]) -> None:
    """One line naming the first flag given that a text-to-image plan would ignore."""
    if request.get("task", "train") != "infer":
        raise UserError(f"--task train: training {model} is not modelled; plan its generation with --task infer")
    # flags the CLI passes only when given (TRAIN_ONLY_REQUEST and the decoder's), and the others when changed
    only_given = (*TRAIN_ONLY_REQUEST, "prompt_len", "output_len", "kv_dtype")
    defaults = PlanRequest(hardware="h100")
    given = [(k, request[k]) for k in _NOT_FOR_IMAGES if k in request
             and (k in only_given or request[k] != getattr(defaults, k))]
    given += [(k, v) for k, v in layout.items() if v is not None]
    given += [(k, v) for k, v in options.items() if k not in _IMAGE_OPTIONS and v != getattr(PlanOptions(), k, v)]
    if given:
        key, value = given[0]
        flag = flag_text(key, fmt_bytes(value) if key == "kv_cache_memory_bytes" else value)
        raise UserError(f"{flag} does not apply to a text-to-image model ({model}: one pipeline per "
                        "device, a fused attention kernel); drop it — the image flags are --resolution, --height, "
                        "--width, --steps, --guidance and --batch (images per call)")


def _refuse_twice(names: list[str]) -> None:
    """One card named twice in --compare (h100,H100-SXM5-80GB) gave two identical rows; `plan --compare` of an LLM
    refuses it, and so does this (found in a hunt). An unknown name is left to the plan, which names it."""
    seen: dict[str, str] = {}
    for name in names:
        try:
            key = "cpu" if name.strip().lower() in LOCAL_NAMES else get_device(name).name
        except UnknownNameError:
            continue
        if key in seen:
            raise UserError(f"--compare {','.join(names)} names {key} twice ({seen[key]} and {name}); drop one")
        seen[key] = name


def plan(model: str, request: dict[str, Any], layout: dict[str, Any], options: dict[str, Any],
         image: dict[str, Any], *, as_json: bool) -> list[dict[str, Any]]:
    """`accelkit plan` of a text-to-image model: the documents, rendered (and returned, for the store)."""
    _refuse_flags(model, request, layout, options)
    spec = resolve_diffusion(model)
    names = [n.strip() for n in str(request.get("compare") or "").split(",") if n.strip()]
    if request.get("compare") is not None and not names:  # it planned hardware 'None' (found in review)
        raise UserError(f"--compare {request['compare']!r} names no hardware; give a comma list, e.g. h100,h200")
    if request.get("hardware") and names:
        raise UserError(f"--hardware {request['hardware']} and --compare {request['compare']} are exclusive; drop one")
    if not names and not request.get("hardware"):  # it planned hardware 'None' (found in review)
        raise UserError("give --hardware NAME (e.g. h100) or --compare A,B,…")
    hardware = names or [str(request["hardware"])]
    _refuse_twice(names)
    side = image.get("resolution")
    gen = default_generation(spec, height=image.get("height") or side, width=image.get("width") or side,
                             steps=image.get("steps"), guidance=image.get("guidance"), batch_size=request.get("batch"))
    if why := check_generation(spec, gen, {k: "--resolution" if side and not image.get(k) else f"--{k}"
                                           for k in ("height", "width")}):
        raise UserError(why)
    docs = compare_image(spec, gen, hardware, precision=request.get("precision", "bf16"),
                         options=PlanOptions(**options), num_devices=request.get("num_devices") or 1)
    emit(docs if names else docs[0], as_json, lambda: render_plans(docs, compare=bool(names)))
    return docs
