"""`accelkit models list|show`."""

from __future__ import annotations

from typing import Any

import typer

from accelkit.cli import text_to_image
from accelkit.cli.helptext import HelpGroup, examples
from accelkit.cli.output import JsonOption, emit, out, table
from accelkit.core import ModelSpec, UserError
from accelkit.core.units import fmt_bytes, fmt_count
from accelkit.models import PRESETS, resolve_model
from accelkit.models.diffusion import DIFFUSION_PRESETS, is_diffusion_model, resolve_diffusion

app = typer.Typer(cls=HelpGroup, help="Architecture presets and Hugging Face config import.", no_args_is_help=True,
                  epilog=examples("accelkit models list", "accelkit models show llama-3.1-70b"))


def model_json(spec: ModelSpec) -> dict[str, Any]:
    """The spec plus its derived counts."""
    return {
        **spec.to_dict(),
        "params": spec.num_params(),
        "active_params": spec.num_active_params(),
        "embedding_params": spec.num_embedding_params(),
        "kv_bytes_per_token_bf16": spec.kv_bytes_per_token(2),
        # one sequence at the full context: a sliding window caps the tokens it keeps
        "kv_bytes_per_sequence_bf16": spec.kv_bytes_per_token(2) * spec.kv_cache_tokens(spec.max_seq_len),
    }


def _shape(s: ModelSpec) -> str:
    if s.kind == "cnn":
        return f"stages {'-'.join(map(str, s.stage_depths))}, widths {s.stage_widths[0]}…{s.stage_widths[-1]}"
    heads = f"{s.num_heads}/{s.kv_heads}" if s.kv_heads != s.num_heads else str(s.num_heads)
    if s.head_size != s.hidden_size // max(s.num_heads, 1):  # Qwen3-32B: 64 heads of 128 in h 5120, not of 80
        heads += f"×{s.head_size}"
    moe = f", {s.num_experts}×top{s.experts_per_token}" if s.num_experts else ""
    return f"L{s.num_layers} h{s.hidden_size} heads {heads} ffn {s.ffn_hidden_size}{moe}"


@app.command("list", epilog=examples("accelkit models list", "accelkit models list --json"))
def list_cmd(as_json: bool = JsonOption) -> None:
    """List the presets with their exact parameter counts (text-to-image pipelines in a table of their own)."""
    specs = [f() for f in PRESETS.values()]
    images = [f() for f in DIFFUSION_PRESETS.values()]

    def render() -> None:
        rows = [(s.name, s.kind, s.family, fmt_count(s.num_params()),
                 fmt_count(s.num_active_params()) if s.num_experts else "", _shape(s)) for s in specs]
        out.print(table("Model presets", ["name", "kind", "family", "params", "active", "shape"], rows, right=(3, 4)))
        out.print(table("Text-to-image presets (random weights; `accelkit bench diffusion`)",
                        ["name", "kind", "family", "params", "denoiser", "shape"], text_to_image.list_rows(images),
                        right=(3, 4)))

    emit([model_json(s) for s in specs] + [text_to_image.spec_json(s) for s in images], as_json, render)


def _kept(spec: ModelSpec) -> str:
    """What a sliding window keeps of one sequence, in words ('' without one)."""
    window = spec.sliding_window
    if window is None or window >= spec.max_seq_len:
        return ""
    windowed = spec.num_window_layers
    if windowed == spec.num_layers:
        return f" ({window:,} kept: sliding window {window:,})"
    return (f" (sliding window {window:,} on {windowed} of {spec.num_layers} layers; the other "
            f"{spec.num_layers - windowed} keep every position)")


def _not_shown(spec: ModelSpec) -> set[str]:
    """Spec fields that describe nothing this architecture has: ModelSpec's defaults (RMSNorm, RoPE at θ 10000) read
    as facts — `models show resnet-50` listed 'norm rmsnorm, position rope, rope_theta 10000', GPT-3 and BERT a
    rope_theta beside their learned positions."""
    hidden = set() if spec.family in ("vit", "resnet") else {"num_channels", "stem_width"}
    if spec.kind == "cnn":
        hidden |= {"norm", "position", "rope_theta", "rope_scaling", "norm_eps"}
    elif spec.position != "rope":
        hidden |= {"rope_theta", "rope_scaling"}
    return hidden


@app.command("show", epilog=examples(
    "accelkit models show llama-3.1-70b",
    "accelkit models show path/to/config.json --json",
))
def show_cmd(
    model: str = typer.Argument(..., help="Preset name, a config.json, a directory holding one, or a diffusers "
                                          "pipeline directory."),
    as_json: bool = JsonOption,
) -> None:
    """Show one architecture: dimensions, exact parameter count (total and active), KV bytes per token; a
    text-to-image pipeline: its components, parameters and FLOPs per image and per step."""
    if not model.strip():  # Path("") is ".": an empty "$MODEL" showed whatever ./config.json holds, as if asked for
        raise UserError("models show: the model is empty; give a preset name (`accelkit models list`), a config.json, "
                        "or a directory holding one")
    if is_diffusion_model(model):
        text_to_image.show(resolve_diffusion(model), as_json)
        return
    spec = resolve_model(model)
    data = model_json(spec)

    def render() -> None:
        rows: list[tuple[str, Any]] = [
            ("params", f"{data['params']:,} ({fmt_count(data['params'])})"),
        ]
        if spec.num_experts:
            rows.append(("active params", f"{data['active_params']:,} ({fmt_count(data['active_params'])})"))
        if spec.kind in ("decoder", "moe"):
            per_token = data["kv_bytes_per_token_bf16"]  # bytes below 1 KiB (a tiny model) read as "0 KiB" in KiB
            rows.append(("KV cache / token", f"{per_token:,} B in bf16" if per_token < 1024 else
                         f"{per_token / 1024:,.0f} KiB in bf16" if per_token % 1024 == 0 else
                         f"{fmt_bytes(per_token)} in bf16"))
            rows.append(("KV cache / sequence", f"{fmt_bytes(data['kv_bytes_per_sequence_bf16'])} in bf16 at "
                         f"{spec.max_seq_len:,} positions{_kept(spec)}"))
        rows += [(k, v) for k, v in spec.to_dict().items()
                 if v not in (None, (), [], False, 0) and k != "name" and k not in _not_shown(spec)]
        out.print(table(spec.name, ["field", "value"], rows))

    emit(data, as_json, render)
