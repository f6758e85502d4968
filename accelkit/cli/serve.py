"""`accelkit serve`: every engine and server setting is a flag generated from EngineConfig / ServerConfig."""

from __future__ import annotations

import dataclasses
import re
import typing
from fractions import Fraction
from pathlib import Path
from typing import Any

import typer

from accelkit.cli.helptext import examples
from accelkit.cli.output import Progress, ProgressOption, err, flag_values
from accelkit.cli.spec_options import field_flags, spec_options
from accelkit.core import UserError
from accelkit.core.serving_memory import DEFAULT_GPU_MEMORY_UTILIZATION, KVCacheDtype, kv_budget_bytes
from accelkit.core.units import fmt_bytes, parse_size
from accelkit.serve import preflight
from accelkit.serve.config import DType, EngineConfig, ServerConfig, origin_problem, served_cpu_threads
from accelkit.serve.heap import frozen_heap
from accelkit.serve.listen import BACKLOG, bind_socket
from accelkit.serve.quant.config import QUANTIZATION_NAMES, SERVED_FORMAT_NAMES, quantization_name_problem
from accelkit.serve.tensor_parallel import check_tensor_parallel_size


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


# vLLM's --dtype names: "half" is float16 and "float" float32 (as in torch), beside the names the config holds
DTYPE_ALIASES = {"half": "float16", "float": "float32"}


def _dtype(text: str) -> str:
    """``--dtype`` as vLLM takes it: auto, float16 (or half), bfloat16, float32 (or float)."""
    choices = typing.get_args(DType)
    value = DTYPE_ALIASES.get(text.strip().lower(), text.strip().lower())
    if value not in choices:
        raise UserError(f"--dtype {text!r} is not a dtype; give one of {', '.join(choices)} (or vLLM's half = "
                        "float16, float = float32)")
    return value


# vLLM's token counts (its human_readable_int): k m g t multiply by 10**3, 10**6, 10**9, 10**12 and take decimals (25.6k);
# K M G T by 2**10, 2**20, 2**30, 2**40 and take whole numbers only
_TOKEN_COUNT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _token_count(text: str, flag: str) -> int:
    """A number of tokens as vLLM reads it: 32768, 32k (32,000), 32K (32,768), 25.6k (25,600)."""
    value = text.strip()
    match = _TOKEN_COUNT.fullmatch(value)
    if match is None:
        try:
            return int(value)
        except ValueError:
            raise UserError(f"{flag} {text!r} is not a number of tokens; give e.g. 32768, 32k (= 32,000) or 32K "
                            "(= 32,768)") from None
    number, suffix = match.groups()
    if suffix in _BINARY_SUFFIX:
        if "." in number:
            raise UserError(f"{flag} {text!r}: decimals go with the decimal suffixes only (k = 1,000; {suffix} = "
                            f"{_BINARY_SUFFIX[suffix]:,}), as in vLLM; write {number}{suffix.lower()} or a whole "
                            f"number of {suffix}")
        return int(number) * _BINARY_SUFFIX[suffix]
    count = Fraction(number) * _DECIMAL_SUFFIX[suffix]
    if count.denominator != 1:
        raise UserError(f"{flag} {text!r} is not a whole number of tokens ({float(count):g}); give e.g. "
                        f"{int(count)} or {round(count)}")
    return int(count)


#: ``--max-model-len auto`` (or -1) as parsed: serve_cmd fits the context to the KV budget (the field gets None first)
AUTO_LEN = "auto"


def _max_model_len(text: str) -> int | None:
    """``--max-model-len``: a token count, or vLLM's ``auto`` / ``-1`` — the model's own context (None)."""
    if text.strip().lower() in ("auto", "-1"):
        return None
    return _token_count(text, "--max-model-len")


def _max_model_len_flag(text: str) -> int | str:
    """The flag's value: a token count, or :data:`AUTO_LEN` for ``auto`` / ``-1`` — the model's own context, shrunk
    to what the KV budget holds where that is known before the weights load (:func:`_fit_context`)."""
    length = _max_model_len(text)
    return AUTO_LEN if length is None else length


def _quantization(text: str) -> str:
    """``--quantization`` (``-q``) as vLLM names it: fp8 (at load), or a quantized checkpoint's own format — checked
    against the checkpoint once its config is read (:func:`quantization_name_problem`)."""
    value = text.strip().lower()
    if value not in QUANTIZATION_NAMES:
        raise UserError(f"--quantization {text!r} is not a quantization accelkit serves; give fp8 (a 16-bit checkpoint "
                        f"quantized at load), or the quantized checkpoint's own format ({SERVED_FORMAT_NAMES}) — or "
                        "leave it out: a quantized checkpoint is served from its own quantization_config")
    return value


#: vLLM's --kv-cache-dtype names of the fp8 cache: accelkit's fp8 cache stores e4m3 codes (kv_cache.Fp8KVCache)
KV_CACHE_DTYPE_ALIASES = {"fp8_e4m3": "fp8"}


def _kv_cache_dtype(text: str) -> str:
    """``--kv-cache-dtype`` with vLLM's spellings: fp8_e4m3 is accelkit's fp8 (e4m3 codes); fp8_e5m2 is refused."""
    choices = typing.get_args(KVCacheDtype)
    value = text.strip().lower()
    value = KV_CACHE_DTYPE_ALIASES.get(value, value)
    if value == "fp8_e5m2":
        raise UserError(f"--kv-cache-dtype {text!r}: accelkit's fp8 KV cache stores e4m3 codes (with a scale per "
                        "token and KV head), not e5m2; give fp8 (= fp8_e4m3), int8 or auto")
    if value not in choices:
        raise UserError(f"--kv-cache-dtype {text!r} is not a KV cache dtype; give one of {', '.join(choices)} (or "
                        "vLLM's fp8_e4m3 = fp8)")
    return value


def _batched_tokens(text: str) -> int:
    return _token_count(text, "--max-num-batched-tokens")


def _body_size(text: str) -> int:
    return _size(text, "--max-body-size")


def _origins(text: str) -> tuple[str, ...]:
    """``--allowed-origins '*'`` or a comma-separated list of origins, each checked (a browser sends the origin
    exactly as scheme://host[:port], so a typo would just never match)."""
    origins = tuple(part.strip() for part in text.split(","))
    for origin in origins:
        problem = origin_problem(origin) if origin else "is empty"
        if problem:
            raise UserError(f"--allowed-origins {text!r}: {origin!r} {problem}")
    return origins


def _threads_said(cpu_threads: int | None) -> str:
    """The ready line's word on torch's threads: on a CPU only (None: the model is on a GPU)."""
    if cpu_threads is None:
        return ""
    return f"; torch on {cpu_threads} CPU thread{'s' if cpu_threads != 1 else ''}"


def _weights_said(device: str, dtype: str, quantization: str | None) -> str:
    """The ready line's word on where and how the weights run: ``cpu, float16`` — what --dtype (vLLM's half and
    float included) and --quantization became."""
    return f"{device}, {dtype}" + (f", {quantization}" if quantization else "")


def _ignored_note(device_type: str, config: EngineConfig) -> str | None:
    """A line for a flag given that the device makes moot: --gpu-memory-utilization off CUDA (the KV budget there
    is --kv-cache-memory, 1 GiB by default), or beside --kv-cache-memory, which sets the budget itself."""
    if config.gpu_memory_utilization == DEFAULT_GPU_MEMORY_UTILIZATION:
        return None
    if config.kv_cache_memory_bytes is not None:
        return (f"note: --gpu-memory-utilization {config.gpu_memory_utilization} is not used: --kv-cache-memory sets "
                "the KV budget")
    if device_type != "cuda":
        return (f"note: --gpu-memory-utilization {config.gpu_memory_utilization} is not used on {device_type}: the KV "
                "budget there is --kv-cache-memory (default 1 GiB)")
    return None


def _chat_template(given: str) -> str:
    """The template's text — ``given`` names a file, or is the template itself (vLLM's "file path or the template in
    single-line form": text with ``{``, ``}`` or a newline; its backslash escapes decoded, so ``\\n`` is a newline)
    — checked to compile as transformers compiles chat templates (its ``{% generation %}`` tag and loop controls
    such as ``{% break %}``): a broken one would otherwise fail every chat request."""
    path = Path(given)
    if path.is_file():
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UserError(f"--chat-template {path} is not UTF-8 text (byte {exc.start}); give a Jinja template "
                            "file") from None
        except OSError as exc:
            raise UserError(f"--chat-template {path} cannot be read ({exc.strerror})") from None
        where = str(path)
    elif any(c in given for c in "{}\n"):
        try:
            text = given.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError as exc:
            raise UserError(f"--chat-template: the template's escapes do not decode ({exc.reason}); give a Jinja "
                            "template file instead") from None
        where = "(the template given)"
    else:
        what = "a directory" if path.is_dir() else "missing"
        raise UserError(f"--chat-template {path} is {what}; give a Jinja template file, or the template itself")
    import jinja2

    try:
        _compile_chat_template(text)
    except jinja2.TemplateSyntaxError as exc:
        raise UserError(f"--chat-template {where}: line {exc.lineno}: {exc.message}; fix the template") from None
    return text


def _compile_chat_template(text: str) -> None:
    """Compile ``text`` as transformers does a chat template (TemplateSyntaxError where it cannot)."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:  # (a private function: where transformers moves it, jinja2 with its loop controls)
        import jinja2
        import jinja2.ext

        jinja2.Environment(extensions=[jinja2.ext.loopcontrols]).parse(text)
        return
    _compile_jinja_template(text)


def _check_step_budget(config: EngineConfig, max_model_len: int, is_default: bool, *, fitted: bool = False) -> None:
    """Without chunked prefill a whole prompt must fit one step: said here, before the weights load (the scheduler
    refuses it too, but only once the weights and the KV cache are in memory). ``fitted``: the context is
    ``--max-model-len auto``'s, below the model's: what the KV budget holds."""
    if config.enable_chunked_prefill or config.max_num_batched_tokens >= max_model_len:
        return
    context = (f"--max-model-len auto's context of {max_model_len} tokens (what the KV budget holds)" if fitted
               else f"the model's context of {max_model_len} tokens" if is_default
               else f"--max-model-len {max_model_len}")
    raise UserError(f"--max-num-batched-tokens {config.max_num_batched_tokens} is below {context}, and with "
                    "--no-chunked-prefill a whole prompt must fit one step; raise --max-num-batched-tokens to at "
                    f"least {max_model_len}, lower --max-model-len, or drop --no-chunked-prefill")


def _fit_context(config: EngineConfig, checked: preflight.CheckedModel, device: str
                 ) -> tuple[EngineConfig, str | None]:
    """``--max-model-len auto`` as vLLM takes it: the model's context (``checked.max_model_len``), shrunk to the
    longest the KV budget holds where that budget is known before the weights load — ``--kv-cache-memory``, or a
    CPU's default — with the note to print; on a GPU without ``--kv-cache-memory`` the budget is a share of the
    memory the loaded weights leave, so the context stays the model's (said in the note)."""
    model_max = checked.max_model_len
    if config.kv_cache_memory_bytes is None and device != "cpu":
        return config, (f"note: --max-model-len auto is the model's context ({model_max:,} tokens) on {device}, where "
                        "the KV budget is known only once the weights are loaded; give --kv-cache-memory too to fit "
                        "the context to the budget")
    budget = kv_budget_bytes(kv_cache_memory_bytes=config.kv_cache_memory_bytes, device_free_bytes=None,
                             gpu_memory_utilization=config.gpu_memory_utilization)
    dtype = config.dtype if config.dtype != "auto" else (checked.args.torch_dtype or "float32")
    per_token = preflight.kv_bytes_per_token(checked.config, dtype=dtype, kv_cache_dtype=config.kv_cache_dtype,
                                             tensor_parallel_size=config.tensor_parallel_size)
    length = preflight.fit_max_model_len(model_max=model_max, budget_bytes=budget, bytes_per_token=per_token,
                                         block_size=config.block_size)
    where = (f"--kv-cache-memory {fmt_bytes(budget)}" if config.kv_cache_memory_bytes is not None
             else f"the KV budget of {fmt_bytes(budget)} (a CPU's default; --kv-cache-memory sets it)")
    if length < 2:
        raise UserError(f"--max-model-len auto: {where} holds no context: {per_token:,} bytes a token, blocks of "
                        f"{config.block_size} tokens and one kept for padding; raise --kv-cache-memory to at least "
                        f"{fmt_bytes((-(-2 // config.block_size) + 1) * config.block_size * per_token)}")
    if length == model_max:
        return config, None
    return (dataclasses.replace(config, max_model_len=length),
            f"note: --max-model-len auto: context {length:,} tokens, the most {where} holds ({per_token:,} bytes a "
            f"token), below the model's {model_max:,} (max_position_embeddings)")


def _context_before_load(config: EngineConfig, checked: preflight.CheckedModel) -> int | None:
    """``--max-model-len auto``'s context where it is known before torch's import (which tells whether ``--device
    auto`` is a GPU): with ``--kv-cache-memory`` or ``--device cpu``, what that budget holds; otherwise the model's
    where a CPU's default budget holds it too (a GPU without ``--kv-cache-memory`` takes the model's); None: known
    once the device is (:func:`_fit_context` raises the same errors there)."""
    if config.device.strip().lower() == "cpu" or config.kv_cache_memory_bytes is not None:
        fitted, _ = _fit_context(config, checked, "cpu")
        return fitted.max_model_len or checked.max_model_len
    try:
        fitted, _ = _fit_context(config, checked, "cpu")
    except UserError:
        return None
    return checked.max_model_len if fitted.max_model_len is None else None


def _fit_after_import(config: EngineConfig, checked: preflight.CheckedModel, context: int | None
                      ) -> tuple[EngineConfig, str | None]:
    """``--max-model-len auto`` once torch tells the device: the config with the context fitted and the note
    (:func:`_fit_context`); the step budget checked here when the context was not known before (``context`` None)."""
    from accelkit.hardware.device import resolve_device  # lazy: it asks torch, imported after the checks

    config, note = _fit_context(config, checked, resolve_device(config.device))
    if context is None:
        _check_step_budget(config, config.max_model_len or checked.max_model_len, True,
                           fitted=config.max_model_len is not None)
    return config, note


def _check_model_dir(model: Path) -> None:
    """``--model`` is a Hugging Face-format directory here: one line naming what it is instead (a diffusers pipeline,
    a Hub id, a path without config.json, a name the file system refuses)."""
    try:
        has_config = (model / "config.json").is_file()
    except OSError as exc:  # a name too long for the file system, say: is_file() lets that through
        raise UserError(f"--model {str(model)[:200]!r} cannot be read ({exc.strerror}); give a Hugging Face-format "
                        "model directory") from None
    if has_config:
        return
    if (model / "model_index.json").is_file():  # (a diffusers pipeline: is_file() read the dir)
        raise UserError(f"--model {model} is a diffusers text-to-image pipeline (model_index.json), and serve runs "
                        f"language models; plan it with `accelkit plan --model {model}` or measure it with "
                        f"`accelkit bench diffusion --model {model}`")
    if _looks_like_hub_id(model):  # `vllm serve org/name` downloads it; accelkit does not
        raise UserError(f"--model {model} is not a directory here; accelkit serves a local Hugging Face-format "
                        f"directory and downloads nothing: fetch it first (huggingface-cli download {model} "
                        "--local-dir DIR) and give DIR")
    raise UserError(f"--model {model} has no config.json; give a Hugging Face-format model directory")


def _served_names(served_model_name: list[str] | None, model: Path) -> list[str]:
    """The ids clients send: ``--served-model-name``'s (a repeated one listed once), else the directory's name."""
    names = list(dict.fromkeys(served_model_name or [model.resolve().name]))
    blank = next((n for n in names if not n.strip()), None)
    if blank is not None:
        raise UserError(f"--served-model-name {blank!r} is blank; give the model id clients send")
    return names


def vllm_argv(args: list[str]) -> list[str]:
    """``accelkit serve``'s arguments with vLLM's argparse forms made click's: ``--served-model-name a b`` (several
    ids after one flag — each word up to the next flag) becomes the flag repeated, and ``--max_model_len`` (vLLM takes
    underscores) ``--max-model-len``. Done on the words as typed, so a bare word elsewhere (``--prefix-caching
    true``) is never taken for a served name."""
    out: list[str] = []
    names = False  # inside --served-model-name's words
    for i, word in enumerate(args):
        if word == "--":  # what follows is no flag
            return out + args[i:]
        if word.startswith("--"):
            flag, eq, value = word.partition("=")
            word = flag.replace("_", "-") + eq + value
            names = word == "--served-model-name"
            out.append(word)
        elif names and out[-1] != "--served-model-name":
            out += ["--served-model-name", word]
        else:
            out.append(word)
    return out


def _model_and_names(model: Path | None, words: list[str]) -> Path:
    """The model directory from ``--model`` or, as ``vllm serve MODEL`` takes it, the first bare word."""
    words = list(words)
    if model is None:
        if not words:
            raise UserError("no model given; give its directory: --model DIR, or first, as in `vllm serve DIR`")
        model = Path(words.pop(0))
    if words:
        raise UserError(f"{words[0]!r} is an extra argument beside the model {str(model)!r}; give the model once "
                        "(--model DIR, or first), and several model ids right after --served-model-name "
                        "(--served-model-name a b)")
    return model


def _looks_like_hub_id(model: Path) -> bool:
    """``org/name`` that is nothing on this disk: a Hugging Face Hub id, as `vllm serve` takes it."""
    text = str(model)
    return (re.fullmatch(r"[\w.-]+/[\w.-]+", text) is not None and not text.startswith(".")
            and not model.exists() and not model.parent.exists())


# vLLM's serve flags that accelkit takes with nothing to do: the flag, then why nothing is done (its --help text)
VLLM_NO_OPS = {
    "trust_remote_code": ("--trust-remote-code", "vLLM's flag, accepted and changes nothing: accelkit reads a model's "
                          "config.json, safetensors and tokenizer files and runs no code from its directory (an "
                          "architecture it does not implement is refused at start-up, naming it)."),
    "disable_log_requests": ("--disable-log-requests", "vLLM's flag, accepted and changes nothing: accelkit never "
                             "logs a request's prompt or parameters (--no-log-requests drops its one line per request "
                             "too)."),
    "disable_log_stats": ("--disable-log-stats", "vLLM's flag, accepted and changes nothing: accelkit logs no "
                          "periodic statistics (/metrics has them)."),
}
# vLLM's parallel layouts beside tensor parallelism: 1 is what accelkit does, more is refused
VLLM_ONE_ONLY = {"pipeline_parallel_size": ("--pipeline-parallel-size", "-pp"),
                 "data_parallel_size": ("--data-parallel-size", "-dp")}
UVICORN_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def _vllm_refusal(*, pipeline_parallel_size: int | None, data_parallel_size: int | None,
                  generation_config: str | None, tokenizer: Path | None, enable_log_requests: bool,
                  model: Path) -> str | None:
    """Why a vLLM flag given asks for what accelkit cannot do (None when each given asks for what it does)."""
    if pipeline_parallel_size is not None and pipeline_parallel_size > 1:
        return (f"--pipeline-parallel-size {pipeline_parallel_size}: accelkit serve splits a model by tensor "
                "parallelism only; give --tensor-parallel-size N instead (the GPUs of one node)")
    if data_parallel_size is not None and data_parallel_size > 1:
        return (f"--data-parallel-size {data_parallel_size}: accelkit serve runs one replica; start one server per "
                "GPU (--device cuda:N, --port) behind a load balancer")
    if generation_config is not None and generation_config != "vllm":
        return (f"--generation-config {generation_config!r}: accelkit serve takes no sampling defaults from "
                "generation_config.json (only its EOS ids) — a request's omitted fields get OpenAI's defaults, as "
                "vLLM's --generation-config vllm; drop the flag and send temperature, top_p … in the requests")
    if tokenizer is not None and tokenizer.resolve() != model.resolve():
        return (f"--tokenizer {str(tokenizer)!r}: accelkit serve reads the tokenizer from the model directory; copy "
                f"the tokenizer's files into {str(model)!r} and drop --tokenizer")
    if enable_log_requests:
        return ("--enable-log-requests: accelkit serve does not log requests' prompts or parameters; its one line per "
                "request (client, path, status, time) is --log-requests, on by default")
    return None


EXAMPLES = examples(
    "accelkit serve --model path/to/hf-model --served-model-name tiny --port 8000",
    "accelkit serve --model path/to/hf-model --kv-cache-dtype fp8 --max-model-len 8192",
)

ENGINE_FLAGS = {"kv_cache_memory_bytes": "--kv-cache-memory", "enable_prefix_caching": "--prefix-caching/--no-prefix-caching",
                "enable_chunked_prefill": "--chunked-prefill/--no-chunked-prefill"}
# vLLM's spellings of the same flags (a pasted vLLM command line runs)
ENGINE_ALIASES = {"enable_prefix_caching": ("--enable-prefix-caching/--no-enable-prefix-caching",),
                  "enable_chunked_prefill": ("--enable-chunked-prefill/--no-enable-chunked-prefill",),
                  "tensor_parallel_size": ("-tp",), "quantization": ("-q",)}
SERVER_FLAGS = {"shutdown_timeout_s": "--shutdown-timeout", "header_timeout_s": "--header-timeout",
                "body_timeout_s": "--body-timeout", "max_body_bytes": "--max-body-size"}


@spec_options(
    EngineConfig, into="engine", exclude=("model",), names=ENGINE_FLAGS, aliases=ENGINE_ALIASES,
    parse={"kv_cache_memory_bytes": _kv_memory, "dtype": _dtype, "max_model_len": _max_model_len_flag,
           "max_num_batched_tokens": _batched_tokens, "quantization": _quantization,
           "kv_cache_dtype": _kv_cache_dtype},
    helps={"max_model_len": "Context length in tokens, as vLLM reads it: 32768, 32k (= 32,000: k m g are 10**3, "
           "10**6, 10**9) or 32K (= 32,768: K M G are 2**10, 2**20, 2**30). Not given: the model's "
           "max_position_embeddings, refused at start-up where that does not fit the KV budget. auto or -1 (vLLM's): "
           "the same, shrunk to the longest context the KV budget holds where that budget is known before the "
           "weights load (--kv-cache-memory, or a CPU's default); on a GPU without --kv-cache-memory, the model's.",
           "quantization": "fp8: quantize a 16-bit checkpoint's Linear weights at load (e4m3, a scale per output "
           "channel; FP8 matmuls on SM90+ GPUs, dequantized per matmul elsewhere). A quantized checkpoint needs no "
           "flag (its config.json's quantization_config is read); vLLM's name of its own format is accepted for it — "
           "gptq, compressed-tensors, modelopt (gptq_marlin, awq_marlin: vLLM's kernels for GPTQ and AWQ "
           "checkpoints, selecting nothing here; AWQ checkpoints are not served) — and another one refused.",
           "kv_cache_dtype": "KV storage: auto (the model dtype), fp8 (e4m3 codes + a scale per token and KV head; "
           "vLLM's fp8_e4m3 is the same, its fp8_e5m2 is refused), int8 (the same in int8). Default auto.",
           "max_num_batched_tokens": "Token budget of one step (decodes + prefill chunks), as --max-model-len takes "
           "it (8192, 8k, 8K). Default 2048.",
           "dtype": "Weights and activations: auto (the checkpoint's dtype, float32 if unset), float16 (or vLLM's "
           "half), bfloat16, float32 (or vLLM's float).",
           "kv_cache_memory_bytes": "KV budget, e.g. 2GiB (default 1 GiB on CPU, gpu_memory_utilization of free GPU memory).",
           "cpu_threads": "On a CPU: torch's threads for the engine's steps. Default: the usable cores less one (at "
           "least 1), a core left to the HTTP server and the clients beside it (a burst of requests waits far longer "
           "when torch holds every core); torch's own count where OMP_NUM_THREADS is set. The usable cores give the "
           "most throughput at saturation on a machine the server has to itself."},
)
@spec_options(
    ServerConfig, into="server", exclude=("served_model_name", "served_model_aliases", "api_key", "chat_template"),
    names=SERVER_FLAGS,
    parse={"max_body_bytes": _body_size, "allowed_origins": _origins},
    helps={"max_body_bytes": "Largest request body, e.g. 8MiB (default); a larger one gets 413 before it is read.",
           "allowed_origins": "Browser origins allowed to call the API (CORS), comma-separated, e.g. "
           "https://app.example.com,http://localhost:3000, or '*' for any; default none (no CORS headers).",
           "log_requests": "Log one line per request at info level (client, method, path, status, milliseconds), 4xx "
           "and 5xx included; vLLM's --disable-uvicorn-access-log is --no-log-requests."},
)
def serve_cmd(
    model: Path | None = typer.Option(
        None, "--model", show_default=False, help="Hugging Face-format directory (config.json, *.safetensors, "
        "tokenizer); required, here or as the first argument (`accelkit serve DIR`, as `vllm serve DIR`)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 to expose beyond this machine)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535,
                      help="Port to listen on (0 picks a free one; stderr says which)."),
    served_model_name: list[str] | None = typer.Option(
        None, "--served-model-name", metavar="NAME",
        help="Model id for clients (default: the directory name); several ids, as vLLM takes them (--served-model-name "
        "a b) or by repeating the flag, are each accepted — responses report the first.",
    ),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar=["ACCELKIT_API_KEY", "VLLM_API_KEY"],
        help="Require 'Authorization: Bearer KEY' on every route except /health, /ping and /metrics (also read from "
        "ACCELKIT_API_KEY, or vLLM's VLLM_API_KEY)."),
    chat_template: str | None = typer.Option(
        None, "--chat-template", help="Jinja file overriding the tokenizer's chat template, or the template itself "
        "(text with {, } or a newline; \\n escapes decoded), as vLLM's flag takes it."),
    progress: bool | None = ProgressOption,
    words: list[str] | None = typer.Argument(
        None, metavar="MODEL", show_default=False,
        help="The model directory (as --model), first, as vLLM's command line gives it."),
    uvicorn_log_level: str = typer.Option(
        "warning", "--uvicorn-log-level", metavar="<" + "|".join(UVICORN_LOG_LEVELS) + ">",
        help="uvicorn's own log (vLLM's flag; accelkit's line per request is --log-requests)."),
    trust_remote_code: bool = typer.Option(False, VLLM_NO_OPS["trust_remote_code"][0],
                                           help=VLLM_NO_OPS["trust_remote_code"][1]),
    disable_log_requests: bool = typer.Option(False, VLLM_NO_OPS["disable_log_requests"][0],
                                              help=VLLM_NO_OPS["disable_log_requests"][1]),
    disable_log_stats: bool = typer.Option(False, VLLM_NO_OPS["disable_log_stats"][0],
                                           help=VLLM_NO_OPS["disable_log_stats"][1]),
    disable_uvicorn_access_log: bool = typer.Option(
        False, "--disable-uvicorn-access-log", help="vLLM's flag: the same as --no-log-requests."),
    enable_log_requests: bool = typer.Option(
        False, "--enable-log-requests", help="vLLM's flag (log each request's prompt and parameters): refused, "
        "accelkit does not log them."),
    pipeline_parallel_size: int | None = typer.Option(
        None, *VLLM_ONE_ONLY["pipeline_parallel_size"], min=1, help="vLLM's flag: 1 only (accelkit splits a model "
        "by --tensor-parallel-size)."),
    data_parallel_size: int | None = typer.Option(
        None, *VLLM_ONE_ONLY["data_parallel_size"], min=1, help="vLLM's flag: 1 only (one replica per server)."),
    generation_config: str | None = typer.Option(
        None, "--generation-config", help="vLLM's flag: vllm only — requests' omitted sampling fields get OpenAI's "
        "defaults, not generation_config.json's (vLLM's default, auto, is refused)."),
    tokenizer: Path | None = typer.Option(
        None, "--tokenizer", help="vLLM's flag: the model directory only (the tokenizer is read from there)."),
    *,
    engine: dict[str, Any],
    server: dict[str, Any],
) -> None:
    """Serve a model behind an OpenAI-compatible API (completions, chat, SSE streaming, /metrics)."""
    model = _model_and_names(model, words or [])
    level = uvicorn_log_level.strip().lower()
    if level not in UVICORN_LOG_LEVELS:
        raise UserError(f"--uvicorn-log-level {uvicorn_log_level!r} is not a level; give one of "
                        f"{', '.join(UVICORN_LOG_LEVELS)}")
    refusal = _vllm_refusal(pipeline_parallel_size=pipeline_parallel_size, data_parallel_size=data_parallel_size,
                            generation_config=generation_config, tokenizer=tokenizer,
                            enable_log_requests=enable_log_requests, model=model)
    if refusal:
        raise UserError(refusal)
    if disable_uvicorn_access_log:
        server["log_requests"] = False
    _check_model_dir(model)
    template = _chat_template(chat_template) if chat_template is not None else None
    names = _served_names(served_model_name, model)
    if engine["cpu_threads"] is None:  # (a core left to the HTTP server on a CPU, unless OMP_NUM_THREADS chose)
        engine["cpu_threads"] = served_cpu_threads()
    auto_len = engine.get("max_model_len") == AUTO_LEN
    if auto_len:  # the model's context until _fit_context fits it to the KV budget
        engine["max_model_len"] = None
    # vLLM's name of the checkpoint's own format: checked against the checkpoint below, which serves itself
    quant_name = engine.get("quantization")
    engine["quantization"] = "fp8" if quant_name == "fp8" else None
    with flag_values({**field_flags(EngineConfig, ENGINE_FLAGS, engine), **field_flags(ServerConfig, SERVER_FLAGS, server),
                      "api_key": "--api-key (or ACCELKIT_API_KEY, VLLM_API_KEY)"}):
        engine_config = EngineConfig(model=str(model), **engine)
        server_config = ServerConfig(
            served_model_name=names[0], served_model_aliases=tuple(names[1:]), api_key=api_key,
            chat_template=template, **server,
        )
        # the config, its architecture, max_model_len and the checkpoint's headers, without torch: a bad directory is
        # one error line within a second
        checked = preflight.check_model_dir(model, engine_config.max_model_len)
        if quant_name is not None:
            problem = quantization_name_problem(quant_name, checked.args.quantization, str(model / "config.json"))
            if problem:
                raise UserError(problem)
        check_tensor_parallel_size(engine_config.tensor_parallel_size, checked.args)
        context = _context_before_load(engine_config, checked) if auto_len else checked.max_model_len
        if context is not None:  # (else once the device, and so the KV budget, is known: below)
            _check_step_budget(engine_config, context, engine.get("max_model_len") is None,
                               fitted=context < checked.max_model_len)
        sock = bind_socket(host, port)  # before the slow part: a busy port is said at once, and only once
    try:
        # progress begins here, within FIRST_LINE_S where stderr is no terminal: importing torch and the web server
        # takes seconds; the checks that need them (memory on the device, the tokenizer) come after it, so their
        # error line may follow progress lines
        with Progress("serve", show=progress) as bar, flag_values():
            bar.update("importing torch and the server", step="import")
            from accelkit.serve.server import build_server, run_server  # lazy: torch, transformers, FastAPI

            engine_config, fit_note = _fit_after_import(engine_config, checked, context) if auto_len \
                else (engine_config, None)

            def on_step(text: str) -> None:
                bar.update(text, step=text)

            app, state = build_server(engine_config, server_config, on_step=on_step)
        bound_port = sock.getsockname()[1]
        # what the startup built (torch, the model, the web stack) out of every collection's walk (accelkit.serve.heap)
        with frozen_heap():
            sock.listen(BACKLOG)  # a client told the address below connects at once (uvicorn accepts it when it starts)
            runner = state.engine.runner
            for note in (fit_note, _ignored_note(runner.device.type, engine_config)):
                if note:
                    err.print(note)
            quant = runner.quantization
            quant_said = None if quant is None else "fp8 weights quantized at load" if quant.is_online else quant.description
            err.print(f"serving {' = '.join(repr(n) for n in names)} on http://{host}:{bound_port}/v1 "
                      f"({_weights_said(str(runner.device), str(runner.dtype).removeprefix('torch.'), quant_said)}; "
                      f"context {state.engine.max_model_len}, {state.engine.runner.num_blocks} KV blocks of "
                      f"{engine_config.block_size} tokens; structured outputs by "
                      f"{engine_config.structured_outputs_backend}{_threads_said(state.engine.cpu_threads)}); "
                      "Ctrl-C or SIGTERM stops")
            run_server(app, state, sock, log_level=level)
    finally:
        sock.close()
    err.print("stopped")
