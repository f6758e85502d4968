"""`accelkit serve`: every engine and server setting is a flag generated from EngineConfig / ServerConfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from accelkit.cli.output import err, flag_values
from accelkit.cli.spec_options import spec_options
from accelkit.core import UserError
from accelkit.core.units import parse_size
from accelkit.serve.config import EngineConfig, ServerConfig


def _size(text: str, flag: str) -> int:
    try:
        size = parse_size(text, field=flag)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if size < 1:
        raise UserError(f"{flag} {text!r} is not a positive size; write e.g. 512MiB or 2GiB")
    return size


def _kv_memory(text: str) -> int:
    return _size(text, "--kv-cache-memory")


def _body_size(text: str) -> int:
    return _size(text, "--max-body-size")


def _chat_template(path: Path) -> str:
    """The template's text, checked to compile — a broken one would otherwise fail every chat request."""
    if not path.is_file():
        what = "a directory" if path.is_dir() else "missing"
        raise UserError(f"--chat-template {path} is {what}; give a Jinja template file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"--chat-template {path} is not UTF-8 text (byte {exc.start}); give a Jinja template file") from None
    except OSError as exc:
        raise UserError(f"--chat-template {path} cannot be read ({exc.strerror})") from None
    import jinja2

    try:
        jinja2.Environment().parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise UserError(f"--chat-template {path}: line {exc.lineno}: {exc.message}; fix the template") from None
    return text


@spec_options(
    EngineConfig, into="engine", exclude=("model",),
    names={"kv_cache_memory_bytes": "--kv-cache-memory", "enable_prefix_caching": "--prefix-caching/--no-prefix-caching",
           "enable_chunked_prefill": "--chunked-prefill/--no-chunked-prefill"},
    parse={"kv_cache_memory_bytes": _kv_memory},
    helps={"kv_cache_memory_bytes": "KV budget, e.g. 2GiB (default 1 GiB on CPU, gpu_memory_utilization of free GPU memory)."},
)
@spec_options(
    ServerConfig, into="server", exclude=("served_model_name", "api_key", "chat_template"),
    names={"shutdown_timeout_s": "--shutdown-timeout", "max_body_bytes": "--max-body-size"},
    parse={"max_body_bytes": _body_size},
    helps={"max_body_bytes": "Largest request body, e.g. 8MiB (default); a larger one gets 413 before it is read."},
)
def serve_cmd(
    model: Path = typer.Option(..., "--model", help="Hugging Face-format directory (config.json, *.safetensors, tokenizer)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 to expose beyond this machine)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535),
    served_model_name: str | None = typer.Option(None, "--served-model-name", help="Model id for clients (default: the directory name)."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="ACCELKIT_API_KEY", help="Require 'Authorization: Bearer KEY' on /v1/*."),
    chat_template: Path | None = typer.Option(None, "--chat-template", help="Jinja file overriding the tokenizer's chat template."),
    *,
    engine: dict[str, Any],
    server: dict[str, Any],
) -> None:
    """Serve a model behind an OpenAI-compatible API (completions, chat, SSE streaming, /metrics)."""
    from accelkit.serve.server import bind_socket, build_server, run_server

    if not (model / "config.json").is_file():
        raise UserError(f"--model {model} has no config.json; give a Hugging Face-format model directory")
    template = _chat_template(chat_template) if chat_template is not None else None
    with flag_values():
        engine_config = EngineConfig(model=str(model), **engine)
        server_config = ServerConfig(
            served_model_name=served_model_name or model.resolve().name, api_key=api_key, chat_template=template,
            **server,
        )
        sock = bind_socket(host, port)  # before the slow part: a busy port is said at once, and only once
    try:
        with flag_values():
            app, state = build_server(engine_config, server_config)
        bound_port = sock.getsockname()[1]
        err.print(f"serving {server_config.served_model_name!r} on http://{host}:{bound_port}/v1 "
                  f"(context {state.engine.max_model_len}, {state.engine.runner.num_blocks} KV blocks of "
                  f"{engine_config.block_size} tokens); Ctrl-C or SIGTERM stops")
        run_server(app, state, sock)
    finally:
        sock.close()
    err.print("stopped")
