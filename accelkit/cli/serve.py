"""`accelkit serve`."""

from __future__ import annotations

from pathlib import Path

import typer

from accelkit.cli.output import err, flag_values
from accelkit.core import UserError
from accelkit.core.units import parse_size


def serve_cmd(
    model: Path = typer.Option(..., "--model", help="Hugging Face-format directory (config.json, *.safetensors, tokenizer)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 to expose beyond this machine)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535),
    served_model_name: str = typer.Option(None, "--served-model-name", help="Model id for clients (default: the directory name)."),
    api_key: str = typer.Option(None, "--api-key", envvar="ACCELKIT_API_KEY", help="Require 'Authorization: Bearer KEY' on /v1/*."),
    max_num_seqs: int = typer.Option(64, "--max-num-seqs", min=1, help="Most sequences in one engine step."),
    max_queue: int = typer.Option(256, "--max-queue", min=0, help="Requests that may wait beyond the running ones; more get 429."),
    max_model_len: int = typer.Option(None, "--max-model-len", min=2, help="Context length (default: the model's)."),
    max_num_batched_tokens: int = typer.Option(2048, "--max-num-batched-tokens", min=1, help="Token budget per step."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto, fp8 or int8."),
    kv_cache_memory: str = typer.Option(None, "--kv-cache-memory", help="KV budget, e.g. 2GiB (default 1 GiB CPU, 90% of free GPU memory)."),
    dtype: str = typer.Option("auto", "--dtype", help="auto, float32, bfloat16 or float16."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda[:N]."),
    no_prefix_caching: bool = typer.Option(False, "--no-prefix-caching", help="Turn off prefix caching."),
    chat_template: Path = typer.Option(None, "--chat-template", help="Jinja file overriding the tokenizer's chat template."),
    shutdown_timeout: float = typer.Option(30.0, "--shutdown-timeout", min=0.0, help="Seconds in-flight requests get on SIGTERM."),
) -> None:
    """Serve a model behind an OpenAI-compatible API (completions, chat, SSE streaming, /metrics)."""
    from accelkit.serve.server import EngineConfig, ServerConfig, build_server, run_server

    if not (model / "config.json").is_file():
        raise UserError(f"--model {model} has no config.json; give a Hugging Face-format model directory")
    with flag_values():
        engine_config = EngineConfig(
            model=str(model), dtype=dtype, device=device, kv_cache_dtype=kv_cache_dtype,
            kv_cache_memory_bytes=parse_size(kv_cache_memory, field="--kv-cache-memory") if kv_cache_memory else None,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
            enable_prefix_caching=not no_prefix_caching,
        )
        server_config = ServerConfig(
            served_model_name=served_model_name or model.resolve().name, api_key=api_key, max_queue=max_queue,
            shutdown_timeout_s=shutdown_timeout, chat_template=chat_template.read_text() if chat_template else None,
        )
        app, state = build_server(engine_config, server_config)
    err.print(f"serving {server_config.served_model_name!r} on http://{host}:{port}/v1 "
              f"(context {state.engine.max_model_len}, {state.engine.runner.num_blocks} KV blocks of "
              f"{engine_config.block_size} tokens); Ctrl-C or SIGTERM stops")
    run_server(app, state, host=host, port=port)
    err.print("stopped")
