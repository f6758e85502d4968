"""The engine's config (model, precision, KV cache, scheduling limits) and the HTTP server's, validated at
construction; no torch here, so the CLI can build its flags from them without importing torch."""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from accelkit.core.device import usable_cores
from accelkit.core.serving_memory import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_MEMORY_UTILIZATION, KVCacheDtype
from accelkit.core.spec import Spec, spec_field
from accelkit.serve.sampling import SEED_MAX

DType = Literal["auto", "float32", "bfloat16", "float16"]
AttentionBackendName = Literal["auto", "sdpa", "cpu", "triton"]
StructuredOutputsBackendName = Literal["llguidance", "xgrammar"]
ToolCallParserName = Literal["hermes", "llama3_json", "mistral"]
#: vLLM's quantization names taken (quant.config.QUANTIZATION_NAMES): fp8 at load, or a quantized checkpoint's format
QuantizationName = Literal["fp8", "gptq", "gptq_marlin", "awq", "awq_marlin", "compressed-tensors", "modelopt"]
ReasoningParserName = Literal["deepseek_r1", "qwen3"]  # (reasoning.REASONING_FORMATS)  # (tool_parsers.FORMATS: each has its format there)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig(Spec):
    """Everything ``LLMEngine`` needs; each component receives only the part it uses."""

    model: str = spec_field(doc="Hugging Face-format directory: config.json, *.safetensors, tokenizer files.")
    dtype: DType = spec_field("auto", doc="Weights and activations; auto = the checkpoint's dtype (float32 if unset).")
    device: str = spec_field("auto", doc="'cpu', 'cuda', 'cuda:N', or auto (cuda when available).")
    quantization: QuantizationName | None = spec_field(
        None, doc="Quantize a 16-bit checkpoint's Linear weights at load (vLLM's --quantization): fp8 = e4m3 with a "
        "scale per output channel, FP8 matmuls on SM90+ GPUs in bfloat16, dequantized per matmul elsewhere. A "
        "quantized checkpoint needs none: its config.json's quantization_config is read; vLLM's name of its own "
        "format (gptq, gptq_marlin, compressed-tensors, modelopt …) is taken for it, and another refused.",
    )
    kv_cache_dtype: KVCacheDtype = spec_field(
        "auto", doc="KV storage: auto = the model dtype; fp8 = e4m3 + per-token-per-head scales; int8 = the same in int8."
    )
    kv_cache_memory_bytes: int | None = spec_field(
        None, min=1, doc="KV cache budget in bytes; None = 1 GiB on CPU, gpu_memory_utilization of free memory on CUDA."
    )
    gpu_memory_utilization: float = spec_field(
        DEFAULT_GPU_MEMORY_UTILIZATION, min=0.01, max=1.0, doc="On CUDA without kv_cache_memory_bytes: fraction of free memory (after weights) for KV."
    )
    block_size: int = spec_field(DEFAULT_BLOCK_SIZE, min=1, max=1024, doc="Tokens per KV block.")
    max_num_seqs: int = spec_field(256, min=1, doc="Most sequences in one step.")
    max_num_batched_tokens: int = spec_field(2048, min=1, doc="Token budget of one step (decodes + prefill chunks).")
    max_model_len: int | None = spec_field(None, min=2, doc="Context length; None = the model's max_position_embeddings.")
    enable_prefix_caching: bool = spec_field(True, doc="Reuse KV blocks of identical prompt prefixes.")
    enable_chunked_prefill: bool = spec_field(True, doc="Split long prompts across steps to fit max_num_batched_tokens.")
    scheduling_policy: Literal["fcfs", "priority"] = spec_field("fcfs", doc="Order of waiting requests.")
    seed: int = spec_field(  # (torch seeds a generator with s < 0 as with s + 2**64: one range names every stream)
        0, min=0, max=SEED_MAX, doc="Seed of the engine's sampling stream (requests without their own seed), "
        "0 to 2**64 - 1.",
    )
    attention_backend: AttentionBackendName = spec_field(
        "auto", doc="Paged attention: triton = kernels reading K/V in place from the cache (CUDA); cpu = a compiled C "
        "loop reading decodes' K/V in place (float32 caches on a CPU; prompt chunks through SDPA); sdpa = gather + "
        "PyTorch SDPA (the reference); auto = triton on CUDA, cpu on a CPU (sdpa where cpu cannot run).",
    )
    enforce_eager: bool = spec_field(
        False, doc="Run every step eagerly; by default decode-only steps on CUDA replay CUDA graphs captured per batch size.",
    )
    overlap_postprocess: bool | None = spec_field(
        None, doc="Detokenize and build step N's outputs while step N+1 runs on the device (its outputs arrive one "
        "step later); None = on for CUDA, off on CPU (where the forward runs in the same thread, so nothing overlaps).",
    )
    tensor_parallel_size: int = spec_field(
        1, min=1, doc="Ranks one model is split over (attention heads and MLP widths), one process each: GPUs from "
        "device on (NCCL), or CPU processes (gloo; for correctness, not speed). Must divide the model's heads.",
    )
    cpu_threads: int | None = spec_field(
        None, min=1, max=4096, doc="On the CPU: torch's intra-op threads for the engine's steps (set on the thread that "
        "steps it); None = torch's default, one per usable core (`accelkit serve` leaves one core to its HTTP server "
        "instead: served_cpu_threads). Fewer can be faster: a small model gains little from a second thread, and every "
        "parallel region waits for its slowest thread, so a core another process (or the HTTP server's own thread) "
        "takes stalls each step (docs/engine.md, 'Threads on a CPU').",
    )
    max_cuda_graph_batch_size: int | None = spec_field(
        None, min=1, doc="Largest decode batch replayed from a CUDA graph (larger ones run eagerly); None = max_num_seqs, at most 512.",
    )
    structured_outputs_backend: StructuredOutputsBackendName = spec_field(
        "llguidance", doc="The grammar engine of structured outputs (guided_json, guided_regex, response_format ...): "
        "llguidance (vLLM's guidance backend: its compile and mask limits bound every request) or xgrammar (vLLM's "
        "default; optional, pip install 'accelkit[xgrammar]'; no compile limit of its own). docs/engine.md, 'Choosing "
        "the backend'.",
    )
    structured_outputs_draw_first: bool = spec_field(
        True, doc="On a CPU whose cores all run the forward: a guided request that is greedy or samples by temperature "
        "alone draws before its mask, kept if the grammar allows it, else masked and drawn again (the same "
        "distribution; llguidance only). Pays when the model mostly keeps to its format: see "
        "accelkit_structured_first_draws_total on /metrics (docs/engine.md, 'Drawing before the mask').",
    )

    def validate(self) -> None:
        if self.structured_outputs_backend == "xgrammar" and importlib.util.find_spec("xgrammar") is None:
            raise ValueError("structured_outputs_backend='xgrammar' needs the xgrammar package, which is not "
                             "installed; pip install 'accelkit[xgrammar]', or leave structured_outputs_backend at "
                             "llguidance")


def served_cpu_threads(environ: Mapping[str, str] | None = None, cores: int | None = None) -> int | None:
    """``accelkit serve``'s torch threads on a CPU when ``--cpu-threads`` is not given: the usable cores less one (at
    least one), so that the event loop, the structured-output compile threads and the clients on the same host have
    a core that no parallel region of a step waits for — as vLLM's CPU backend keeps a core for its API server. None
    (torch's own count) where ``OMP_NUM_THREADS`` is set: whoever set it chose. A burst of requests arriving at a
    two-core server waited 4x longer with torch on both cores, whose gain is at saturation only (docs/engine.md,
    'Threads on a CPU')."""
    if "OMP_NUM_THREADS" in (os.environ if environ is None else environ):
        return None
    return max(1, (usable_cores() if cores is None else cores) - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig(Spec):
    """HTTP-side settings (the engine has its own EngineConfig)."""

    served_model_name: str = spec_field(
        doc="The model id responses report and /v1/models lists first; clients may also send any alias."
    )
    served_model_aliases: tuple[str, ...] = spec_field(
        (), doc="Further model ids clients may send (each listed by /v1/models); responses report served_model_name."
    )
    api_key: str | None = spec_field(
        None, doc="When set, every route but /health and /metrics requires 'Authorization: Bearer KEY'."
    )
    max_queue: int = spec_field(256, min=0, doc="Requests allowed to wait beyond the running batch; more get 429.")
    max_body_bytes: int = spec_field(
        8 * 2**20, min=1, doc="Largest request body accepted; a larger one gets 413 before it is read or parsed."
    )
    shutdown_timeout_s: float = spec_field(
        30.0, min=0.0, max=86400.0,
        doc="On SIGTERM, seconds in-flight requests get to finish before they are aborted (0 = abort at once).",
    )
    header_timeout_s: float = spec_field(
        10.0, min=0.1, max=3600.0, doc="A connection must send a request's headers within this many seconds of "
        "connecting or of its previous response, else it is closed (a client that connects and sends nothing holds "
        "a file descriptor).",
    )
    max_connections_per_client: int | None = spec_field(
        None, min=1, doc="Open connections one client address may hold; one more gets 429 and is closed. Default: "
        "max_num_seqs + max_queue + 32. Behind a reverse proxy every client has the proxy's address: raise it to "
        "what the proxy opens, and cap clients at the proxy.",
    )
    body_timeout_s: float = spec_field(
        60.0, min=0.1, max=3600.0, doc="A request's body must arrive in full within this many seconds of its first "
        "read, else 408 and the connection closes (a client trickling a body holds its handler).",
    )
    log_requests: bool = spec_field(
        True, doc="Log one line per request at info level (client, method, path, status, milliseconds), 4xx and 5xx "
        "included.",
    )
    chat_template: str | None = spec_field(None, doc="Jinja chat template overriding the tokenizer's.")
    tool_call_parser: ToolCallParserName | None = spec_field(
        None, doc="The model's tool-call format, for chat requests with tools and tool_choice 'auto' (the default "
        "with tools): hermes = Hermes 2/3, Qwen2.5, Qwen3, QwQ (<tool_call>{\"name\": …, \"arguments\": …}"
        "</tool_call>); llama3_json = Llama 3.1-3.3 ({\"name\": …, \"parameters\": …}); mistral = Mistral 7B v0.3, "
        "Nemo, Small 2409 ([TOOL_CALLS] [{\"name\": …, \"arguments\": …}]) and, where the tokenizer has the [ARGS] "
        "token (v11 on: Small 3.1+, Magistral, Devstral), [TOOL_CALLS]name[ARGS]{…}. Each call the model opens "
        "is constrained to a whole call to one of the request's tools with valid arguments, and returned as "
        "tool_calls. None: 'auto' with tools is a 400.",
    )
    reasoning_parser: ReasoningParserName | None = spec_field(
        None, doc="Chat responses carry the model's thinking (<think>…</think>) as the message's reasoning (and "
        "reasoning_content), apart from its content: deepseek_r1 = DeepSeek-R1 and distills, QwQ, Qwen3 "
        "Thinking-2507 (everything before </think> is reasoning); qwen3 = Qwen3's hybrid models (reasoning only "
        "when the output opens with <think>).",
    )
    enable_auto_tool_choice: bool = spec_field(
        False, doc="vLLM's flag, accepted so that vLLM command lines run: tool_choice 'auto' is served whenever "
        "tool_call_parser is given, and this needs one.",
    )
    allowed_origins: tuple[str, ...] = spec_field(
        (), doc="Browser origins allowed to call the API (CORS): '*' or 'https://host[:port]' each; none = no CORS headers."
    )
    allowed_hosts: str | None = spec_field(
        None, doc="Host names the server answers besides localhost and loopback addresses, comma-separated (any port), "
        "or '*' for any. Checked only where it listens on a loopback address without an API key: a web page that "
        "rebinds its own name to 127.0.0.1 would otherwise be same-origin with the server; other Hosts get 400.",
    )

    def validate(self) -> None:
        if self.enable_auto_tool_choice and self.tool_call_parser is None:
            raise ValueError("enable_auto_tool_choice needs tool_call_parser, the model's tool-call format; give "
                             "tool_call_parser hermes (Hermes, Qwen2.5, Qwen3), llama3_json (Llama 3.1-3.3) or "
                             "mistral (Mistral 7B v0.3, Nemo, Small 2409, Small 3.1 and later)")
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key is empty; give a non-empty key or none at all")
        if self.api_key is not None and self.api_key.strip() != self.api_key:  # (the key itself is never said)
            what = "is blank" if not self.api_key.strip() else "has leading or trailing whitespace (a newline from a key file?)"
            raise ValueError(f"api_key {what}: a client cannot send that in its Authorization header, so every request "
                             "would get 401; strip the whitespace from the key")
        for name in (self.served_model_name, *self.served_model_aliases):
            if not name.strip():
                raise ValueError(f"served_model_name {name!r} is blank; give each model id some text")
        for origin in self.allowed_origins:
            problem = origin_problem(origin)
            if problem:
                raise ValueError(f"allowed_origins {origin!r} {problem}")
        for host in self.host_names:
            if not _is_host_name(host):
                raise ValueError(f"allowed_hosts {self.allowed_hosts!r}: {host!r} is not a host name; give names or "
                                 "addresses such as myhost.internal or 10.0.0.5, comma-separated (no scheme, port or "
                                 "path), or '*'")

    @property
    def host_names(self) -> tuple[str, ...]:
        """``allowed_hosts`` as a Host header's name is compared with them: lower case, an IPv6 address without its
        brackets, no trailing dot."""
        if self.allowed_hosts is None:
            return ()
        return tuple(part.strip().lower().removeprefix("[").removesuffix("]").rstrip(".")
                     for part in self.allowed_hosts.split(","))

    @property
    def model_names(self) -> tuple[str, ...]:
        """Every model id clients may send; the first is what responses report."""
        return (self.served_model_name, *self.served_model_aliases)


def _is_host_name(name: str) -> bool:
    """'*', a DNS name (letters, digits, '-', '_', dots between), or an IP address."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name == "*" or re.fullmatch(r"[a-z0-9_]+([.-]+[a-z0-9_]+)*", name) is not None


def origin_problem(origin: str) -> str | None:
    """Why ``origin`` cannot be a CORS allowed origin (None when it can): a browser sends ``scheme://host[:port]``
    exactly, so anything with a path, a trailing slash or another scheme would never match."""
    if origin == "*":
        return None
    try:
        parts = urlsplit(origin)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError:
        parts = None
    if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.username is not None
            or parts.path or parts.query or parts.fragment or origin != f"{parts.scheme}://{parts.netloc}"):
        return "is not an origin; give '*' or scheme://host[:port] such as https://app.example.com (no path)"
    return None
