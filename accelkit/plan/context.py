"""PlanContext: everything about a (workload, cluster, options) that does not depend on the layout,
computed once so that evaluating a layout in the search is a few hundred float operations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accelkit.core import Cluster, DeviceSpec, ModelSpec, UserError, Workload
from accelkit.core.serving_memory import weight_bytes_per_param
from accelkit.core.units import fmt_bytes
from accelkit.plan import flops as F
from accelkit.plan.calibrate import efficiency, missing_cpu_peak
from accelkit.plan.comm import scaleout_bandwidth
from accelkit.plan.fitted import FIT_SOURCE, serving_attained, sustained_tensor
from accelkit.plan.layout import check_inference_workload, check_task_options
from accelkit.plan.memory import ACT_BYTES, TRAIN_WEIGHT_BYTES
from accelkit.plan.options import PlanOptions
from accelkit.plan.priors import (
    FLASH1_SOURCE,
    FLASH_BLOCK,
    FLASH_TRITON_SOURCE,
    OFFLOAD_BANDWIDTH,
    OVERLAP_SOURCE,
    Efficiency,
    family,
)

#: tokens per training step when no global batch is given (~4 Mi tokens; GPT-3 175B used 3.2 M)
DEFAULT_STEP_TOKENS = 4 * 2**20


def peak_dtype(precision: str, quantization: str | None, task: str) -> str:
    """Which dense peak the matmuls run at."""
    if task != "train" and quantization == "int8-dynamic":
        return "int8"
    if task != "train" and quantization == "fp8-dynamic":
        return "fp8"
    return precision


def kv_cache_dtype(workload: Workload) -> str:
    """The KV-cache dtype actually used: 'auto' is the model's activation dtype (fp8 compute keeps bf16
    activations, so its cache is bf16 unless fp8 is asked for)."""
    kv = workload.recipe.kv_cache_dtype
    if kv != "auto":
        return kv
    precision = workload.recipe.precision
    return {"fp32": "fp32", "tf32": "fp32", "fp16": "fp16"}.get(precision, "bf16")


@dataclass(slots=True)
class PlanContext:
    workload: Workload
    cluster: Cluster
    options: PlanOptions
    efficiency: Efficiency
    peak_dtype: str
    peak: float
    e: int  # activation bytes per element
    weight_bytes: float  # per parameter (training weight copy, or inference weight incl. quantization)
    # per parameter of the embedding and the head: inference keeps them 16-bit under fp8 or weight quantization (as
    # accelkit serve and vLLM do, and torchao's quantize_, which converts Linears only); else weight_bytes
    end_weight_bytes: float = 0.0
    layer_params: float = 0.0  # one block, dense part (+ router)
    layer_expert_params: float = 0.0  # one block, all experts
    embedding_params: float = 0.0
    head_params: float = 0.0
    layer_matmul_active: float = 0.0
    column_share: float = 0.5  # of a layer's matmul weights in column-parallel layers (QKV, MLP in): their dW window
    cnn: dict[str, Any] | None = None  # traced per-sample figures for CNNs
    peak_16: float = 0.0  # the attention kernels' dense peak: bf16/fp16 (fp8 matmuls too), fp32 at fp32/tf32
    sustained: float = 1.0  # fitted.py: sustained tensor-core factor of this device's generation
    sustained_source: str = ""
    serving_attained: float = 1.0  # fitted.py: fraction of the prior rates a serving engine attains (inference only)
    serving_attained_source: str = ""
    #: ``serving_attained`` is borrowed from another family (fitted.SERVING_ATTAINED_ASSUMED), not fitted on this one
    serving_attained_assumed: bool = False
    assumptions: list[str] = field(default_factory=list)
    #: what the user should see before the plan (the CLI prints each as a ``warning:`` line; ``--json``: ``warnings``),
    #: e.g. that no device count reached the target
    warnings: list[str] = field(default_factory=list)
    #: where ``options.price_per_device_hour`` comes from: "given" (the caller's) or "catalog: <offer, source,
    #: date>" (accelkit/hardware/data/prices.csv, which ``compare`` reads); None without a price
    price_source: str | None = None
    #: ``compare``: the basis its rows share, in words (the same device count, or the same budget)
    compare_basis: str | None = None
    #: the layout-level estimates already made on this context, keyed by the layout fields they read: a layout's
    #: training memory and the activations and pipeline-stage time that the ZeRO stages of one shape share
    #: (evaluate.py ``train_memory``, time.py ``train_time``). The device-count search checks a layout's memory up to
    #: three times (a micro-batch's fit decides whether the next is tried; the count it settles on is ranked in
    #: full); emptied when the search returns (its plans keep the context, not the cache). Not an init field, so
    #: ``dataclasses.replace`` (another cluster, other options) starts an empty one.
    memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def model(self) -> ModelSpec:
        return self.workload.model

    @property
    def device(self) -> DeviceSpec:
        return self.cluster.device


def gradient_element_bytes(ctx: PlanContext) -> float:
    """Bytes per gradient element as the plain path reduces it."""
    precision = ctx.workload.recipe.precision
    return 4.0 if ctx.options.grad_reduce_fp32 else float(TRAIN_WEIGHT_BYTES[precision])


def _split_params(model: ModelSpec) -> tuple[float, float, float, float]:
    """(dense params per layer, expert params per layer, embedding params, head params)."""
    h = model.hidden_size
    emb = float(model.num_embedding_params())
    head = float(h * (1 if model.norm == "rmsnorm" else 2))
    if model.kind in ("decoder", "moe") and not model.tied_embeddings:
        head += model.vocab_size * h
    if model.pooler:
        head += h * h + h
    experts = 0.0
    if model.num_experts is not None and model.experts_per_token != model.num_experts:
        idle = model.num_params() - model.num_active_params()
        per_expert = idle / (model.num_layers * (model.num_experts - model.experts_per_token))  # type: ignore[operator]
        experts = per_expert * model.num_experts
    # (every expert active on every token — k = E: they are read and run as a dense MLP, counted in the layer)
    layer = (model.num_params() - emb - head) / model.num_layers - experts
    return layer, experts, emb, head


def check_fp8_activations(workload: Workload, options: PlanOptions) -> None:
    """``fp8_activations="te"`` describes Transformer Engine's FP8 training modules: it needs a transformer trained at
    fp8 on the fused kernel stack, where the planner's activation terms are TE's."""
    recipe = workload.recipe
    if workload.task != "train" or recipe.precision != "fp8":
        what = f"--task {workload.task}" if workload.task != "train" else f"--precision {recipe.precision}"
        raise UserError(f"--fp8-activations te is what Transformer Engine keeps when it trains at --precision fp8; "
                        f"{what} keeps no FP8 activations — drop --fp8-activations")
    if options.kernels != "fused" or not workload.model.is_transformer:
        raise UserError("--fp8-activations te plans Transformer Engine's fused transformer modules; add --kernels "
                        "fused" + ("" if workload.model.is_transformer else f" (and a transformer: {workload.model.name} "
                                                                                "is not one)"))


def check_device_memory(workload: Workload, device: DeviceSpec, options: PlanOptions) -> None:
    """Refuse what no device count can hold, one device alone being too small for it: an ``--overhead`` allowance
    (per device) of the whole memory or more, which searched every count up to --max-devices and showed 65,536
    devices that do not fit, and an inference ``--kv-cache-memory`` budget (each device's) above the memory, which
    the engine refuses (serve/preflight.py check_memory) — both found in review."""
    memory = device.memory_bytes
    if not memory:
        return
    if options.overhead_bytes >= memory:
        raise UserError(f"--overhead {fmt_bytes(options.overhead_bytes)} is not less than the {fmt_bytes(memory)} of "
                        f"one {device.name}: no device would hold anything else; lower it (it is the framework "
                        "allowance per device, default 2 GiB)")
    budget = options.kv_cache_memory_bytes
    if budget is not None and workload.task != "train" and workload.model.kind in ("decoder", "moe") \
            and budget > memory:
        raise UserError(f"--kv-cache-memory {fmt_bytes(budget)} is more than the {fmt_bytes(memory)} of one "
                        f"{device.name} (the budget is each device's; `accelkit serve` refuses it); lower it")


def make_context(workload: Workload, cluster: Cluster, options: PlanOptions | None = None) -> PlanContext:
    """Resolve peaks and efficiencies (calibrated or prior) and the model's split of parameters. An inference
    workload that sets a training-only field (optimizer, offload, grad_compression) or option (optimizer_states,
    dropout, ...), or a training workload that sets an inference-only option (max_serving_batch, block_size, ...) or
    KV-cache dtype, is refused here: every plan, search and comparison starts with a context."""
    check_inference_workload(workload)
    options = options or PlanOptions()
    check_task_options(workload, options)
    model, recipe = workload.model, workload.recipe
    dtype = peak_dtype(recipe.precision, recipe.quantization, workload.task)
    peak = cluster.device.peak(dtype)
    if peak is None and cluster.device.vendor == "cpu":  # the probed local CPU: its peaks are stored probes
        raise UserError(missing_cpu_peak(cluster.device, dtype))
    if peak is None:
        have = ", ".join(cluster.device.peak_flops) or "none"
        raise UserError(f"{cluster.device.name} has no {dtype} peak in the catalog (it has: {have}); "
                        "choose another --precision")
    if options.fp8_activations == "te":
        check_fp8_activations(workload, options)
    check_device_memory(workload, cluster.device, options)
    if workload.task == "train":
        wbytes: float = TRAIN_WEIGHT_BYTES[recipe.precision]
    else:
        wbytes = weight_bytes_per_param(recipe.quantization or recipe.precision)  # the engine's table too
    eff = efficiency(cluster.device, dtype, use_calibration=options.use_calibration)
    # attention runs in bf16/fp16 even where the matmuls run in fp8; at fp32/tf32 in fp32 — flash attention has no
    # fp32 kernel, so it is SDPA's memory-efficient or math path on the fp32 units (timing it at the bf16 peak put
    # an fp32 plan's MFU past 100%: found in review)
    if ACT_BYTES[recipe.precision] == 4:
        peak_16 = cluster.device.peak("fp32") or peak
    else:
        peak_16 = cluster.device.peak("bf16") or cluster.device.peak("fp16") or peak
    sustained, sustained_source = (1.0, "a CPU's peak is its measured matmul") if cluster.device.vendor == "cpu" \
        else sustained_tensor(family(cluster.device))
    # fitted on LLM serving engines' published figures: a decoder's inference only, not training, not a CNN
    serving = workload.task != "train" and model.kind in ("decoder", "moe") and cluster.device.vendor != "cpu"
    attained, attained_source, attained_assumed = serving_attained(family(cluster.device)) if serving \
        else (1.0, "", False)
    ctx = PlanContext(workload=workload, cluster=cluster, options=options, efficiency=eff, peak_dtype=dtype,
                      peak=peak, e=ACT_BYTES[recipe.precision], weight_bytes=wbytes, peak_16=peak_16,
                      end_weight_bytes=wbytes if workload.task == "train" else max(wbytes, ACT_BYTES[recipe.precision]),
                      sustained=sustained, sustained_source=sustained_source, serving_attained=attained,
                      serving_attained_source=attained_source, serving_attained_assumed=attained_assumed,
                      price_source=None if options.price_per_device_hour is None else "given")
    if model.kind == "cnn":
        from accelkit.plan.cnn import trace_cnn  # imports torch: only CNN plans pay for it

        ctx.cnn = trace_cnn(model, dtype_bytes=ctx.e)
        ctx.assumptions.append("CNN FLOPs and saved activations traced from the real module on the meta device "
                               f"at {ctx.cnn['image_size']}×{ctx.cnn['image_size']} (FlopCounterMode, saved_tensors_hooks)")
    else:
        ctx.layer_params, ctx.layer_expert_params, ctx.embedding_params, ctx.head_params = _split_params(model)
        ctx.layer_matmul_active = float(F.layer_matmul_params(model))
        ctx.column_share = F.column_parallel_params(model) / ctx.layer_matmul_active
    ctx.assumptions += _base_assumptions(ctx)
    return ctx


def _base_assumptions(ctx: PlanContext) -> list[str]:
    d, o, w = ctx.device, ctx.options, ctx.workload
    out = [
        f"peak: {d.name} dense {ctx.peak_dtype} {ctx.peak / 1e12:g} TFLOP/s, memory {d.memory_bytes / 1e9:g} GB "
        f"(10^9 B), bandwidth {d.memory_bandwidth_bytes_per_s / 1e12:g} TB/s (catalog status {d.status or '-'}: {d.source})",
        *ctx.efficiency.sources,
        "model FLOPs: 2 FLOPs per multiply-add over every matmul incl. the LM head, attention 4·b·s²·H·Q per layer "
        "(full square, PaLM App. B / FlopCounterMode convention), training = 3 × forward"
        + (" less the weight-gradient matmuls (--frozen-weights: 2 × the forward's matmuls)"
           if o.frozen_weights and w.task == "train" else "")
        + "; MFU divides these by the dense peak (recomputation excluded)",
        f"attention kernel: {o.attention}" + (" (unfused, full s² scores through memory)" if o.attention == "math" else
                                             " (causal flash executes ½ of the counted attention FLOPs, backward "
                                             "recomputes QKᵀ: 3.5× the forward FLOPs per step)")
        + (f"; {FLASH_TRITON_SOURCE}" if o.attention == "flash-triton" else "")
        + (f"; {FLASH1_SOURCE}" if o.attention == "flash1" else ""),
        f"sustained tensor-core factor {ctx.sustained:.3f} × the matmul and attention efficiencies above (free "
        f"parameter, {ctx.sustained_source}: {FIT_SOURCE})",
        *([f"serving attained {ctx.serving_attained:.3f} × the matmul, attention and memory-bound rates above, "
           f"prefill and decode ({'' if ctx.serving_attained_assumed else 'free parameter, '}"
           f"{ctx.serving_attained_source})"] if ctx.serving_attained != 1.0 else []),
        f"memory-bound kernels: {o.kernels} stack (accelkit/plan/kernels.py: bytes per token of every norm, residual "
        "add, rotary, activation, dropout and copy, forward ×(1 + 2 eager | 1.5 fused) for backward; the loss over "
        "the logits; the optimizer step reads and writes its states once) at HBM bandwidth × memory efficiency",
        f"framework allowance {o.overhead_bytes / 2**30:g} GiB per device (context, communicator buffers, "
        "fragmentation): assumed",
        _communication_assumption(ctx),
    ]
    if ctx.model.sliding_window is not None:
        out.append(_window_assumption(ctx))
    if w.task == "train" and w.recipe.offload:
        out.append(f"ZeRO-Offload: the optimizer states live in host memory; each step copies this device's gradient "
                   f"shard to the host and the updated weights back over PCIe at {OFFLOAD_BANDWIDTH / 1e9:g} GB/s per "
                   "device and direction (PCIe 4.0 x16 effective: assumed), not overlapped with compute; the CPU Adam "
                   "step itself is NOT modelled (its time is not in the step), nor the host memory bandwidth the "
                   "ranks of a node share; host_memory_bytes is per rank")
    if w.task == "train" and (w.recipe.grad_compression != "none" or o.grad_reduce_fp32):
        out.append(_compression_assumption(ctx))
    if d.tdp_w:
        out.append(f"energy ESTIMATED from TDP {d.tdp_w:g} W × activity factor {o.activity_factor:g} (assumed, "
                   "--activity-factor) × time; not measured")
    else:
        out.append(f"energy not estimated: {d.name} has no published TDP")
    if w.task == "train":
        out.append(_train_memory_assumption(ctx))
    elif ctx.cnn is not None:  # one forward pass per batch (time.infer_time): no prefill chunks, decode or KV cache
        out.append("inference: one forward pass per batch — the traced forward FLOPs at the matmul rate plus the "
                   "weights and twice the saved activations at HBM bandwidth; no decode, no KV cache")
    elif ctx.model.kind not in ("decoder", "moe"):  # an encoder or a ViT: one pass over its input, no cache
        out.append("inference: one forward pass per batch, in chunks of "
                   f"{o.prefill_chunk_tokens} tokens; pipeline stages run one batch after another (pp adds capacity, "
                   "not speed); per layer a roofline of the matmuls against the weight reads, attention and the "
                   "memory-bound kernels (fused, CUDA graphs: no launch cost); no decode, no KV cache")
    else:
        out.append("inference: pipeline stages run one batch after another (pp adds capacity, not speed); "
                   f"prefill in chunks of {o.prefill_chunk_tokens} tokens; decode time at the mean context "
                   "prompt + output/2; per layer a roofline of the matmuls against the weight reads and of attention "
                   "against the KV reads, plus the memory-bound kernels (fused, CUDA graphs: no launch cost); "
                   "serving_itl_s adds the prefills continuous batching interleaves (batch/output_len per step); "
                   f"KV cache {kv_cache_dtype(w)}"
                   + (" (kv_cache_dtype auto = the activation dtype)" if w.recipe.kv_cache_dtype == "auto" else ""))
    return out


def _communication_assumption(ctx: PlanContext) -> str:
    """How the collectives are modelled: rings, two-level across nodes, and what overlaps what."""
    o = ctx.options
    return (
        f"communication: ring collectives inside a node (one-direction link bandwidth × efficiency); groups that span "
        f"nodes run two-level, pipelined, every GPU on its own NIC at {ctx.cluster.scaleout_bandwidth_bytes_per_s / 1e9:g} "
        "GB/s" + _host_link_cap(ctx) + "; tensor-parallel collectives " + ("overlap the layer's matmuls" if o.tp_comm_overlap else "are exposed")
        + ("" if o.tp_comm_overlap or not o.tp_backward_overlap else " (the backward ones behind the "
                                                                      "weight-gradient matmuls)")
        + "; pipeline sends are exposed" + (" (scatter/gather: 1/tp across nodes)" if o.pp_scatter_gather else "")
        + ", the interleaved 1F1B bubble is (pp−1)/vp stage-micro-batches; context-parallel K/V exchange hides "
        "behind attention; ZeRO 0-1 gradient reduction " + ("overlaps the last micro-batch's backward"
                                                            if o.grad_reduce_overlap else "runs after the backward")
        + ", ZeRO-2 reduce-scatters after every micro-batch's backward (sharded gradients cannot accumulate: "
        "DeepSpeed stage 2, FSDP SHARD_GRAD_OP)" + (", each overlapping it" if o.grad_reduce_overlap else "")
        + ", ZeRO-3 gathers/scatters every micro-batch one layer ahead"
        + (" (backward gathers exposed: BACKWARD_POST)" if o.fsdp_backward_prefetch == "post" else "")
        + f" — only the excess is exposed; {OVERLAP_SOURCE}"
    )


def _host_link_cap(ctx: PlanContext) -> str:
    """The PCIe cap on a card's network bandwidth (comm.scaleout_bandwidth), when it applies."""
    capped = scaleout_bandwidth(ctx.cluster)
    if capped >= ctx.cluster.scaleout_bandwidth_bytes_per_s:
        return ""
    return f", capped at the card's own {ctx.device.scaleup_fabric} link, {capped / 1e9:g} GB/s, which that traffic crosses"


def _train_memory_assumption(ctx: PlanContext) -> str:
    """How training memory is modelled: the optimizer states, the activations term by term, the pipeline's."""
    o = ctx.options
    kept = []  # what the kernel stack keeps that Korthikanti's GPT layer does not have (memory.py)
    if ctx.model.gated_mlp:
        kept.append("SwiGLU keeps gate, up, silu(gate) and their product, 4 ffn-sized tensors" if o.kernels == "eager"
                 else "one fused SwiGLU kernel keeps its [gate|up] input and fc2 its input, 3 ffn-sized tensors")
    if ctx.model.qk_norm:
        kept.append("the per-head q/k RMSNorms keep " + ("their fp32 upcast and normalised output" if o.kernels == "eager"
                                                         else "their input") + " and an fp32 rsqrt per head")
    if ctx.model.num_experts:
        kept.append("each of a token's k routed copies keeps the expert input and its output before the routing "
                 "weight scales it")
    states = ("memory: Adam keeps fp32 m and v (+ fp32 master weights under mixed precision, ZeRO paper K=12); "
              if o.optimizer_states == "fp32" else
              "memory: Adam keeps bf16 m and v (+ a bf16 copy of the weights under mixed precision: 6 B per "
              "parameter, --optimizer-states bf16); ")
    if o.frozen_weights:
        states = ("memory: frozen weights (--frozen-weights, LoRA): no gradients or optimizer states for them, "
               "the adapters not counted; ")
    grads = "gradients in the weight dtype"
    if o.grad_reduce_fp32 and TRAIN_WEIGHT_BYTES[ctx.workload.recipe.precision] < 4 and not o.autocast_fp32_params:
        grads = ("gradients in fp32, as they are reduced (--grad-reduce-fp32: Megatron's fp32 main grads; under ZeRO 3 "
                 "FSDP2's fp32 parameter shards, which are then the master weights)")
    return (states
            + f"SGD is taken with momentum; {grads}; activations per Korthikanti et al. "
            f"2022 term by term ({o.kernels} kernels" + "".join(f"; {k}" for k in kept)
            + "); 1F1B pipeline keeps min(pp, micro-batches) in flight, "
            "interleaved (vp > 1) pp + (pp−1)/vp (Korthikanti et al. 2022 §4.2.3)")


def _window_assumption(ctx: PlanContext) -> str:
    m, w = ctx.model, ctx.workload
    window = m.sliding_window
    layers = "every layer attends" if m.num_window_layers == m.num_layers \
        else f"{m.num_window_layers} of {m.num_layers} layers attend"
    text = (f"sliding-window attention: {layers} to the last {window:,} tokens, so flash attention executes "
            f"s·w − w²/2 query-key pairs there (s > w; model FLOPs count s·min(s, w)) at the band's causal block factor "
            f"w/(w+{FLASH_BLOCK}), not s/(s+{FLASH_BLOCK}) (two of each query block's w/{FLASH_BLOCK} + 1 tiles are partly "
            "masked); unfused (math) attention still computes the masked s² scores")
    if w.task != "train" and m.kind in ("decoder", "moe"):
        context = w.prompt_len + w.output_len
        text += (f"; the KV cache keeps min(context, {window:,}) tokens per sequence on those layers "
                 f"({m.kv_cache_tokens(context):,.0f} of {context:,} per layer"
                 + (" on average" if m.num_full_attention_layers else "") + " here) and a decode step reads only those")
    return text


def _compression_assumption(ctx: PlanContext) -> str:
    r, o = ctx.workload.recipe, ctx.options
    plain = gradient_element_bytes(ctx)  # the rule grad_comm.py plans with
    text = (f"data-parallel gradients reduced in {plain:g} B per element"
            + (" (grad_reduce_fp32: fp32 gradients under mixed precision)" if o.grad_reduce_fp32 else ""))
    if r.grad_compression in ("bf16", "fp16"):
        text += (f"; {r.grad_compression} compression: 2 B per element (DDP: torch's {r.grad_compression}_compress_hook, "
                 "+8 B of cast traffic per element; ZeRO/FSDP2: reduce_dtype, the reduced shard cast back)")
        if plain <= 2:
            text += " — no change here: the gradients already reduce in 2 B (see --grad-reduce-fp32)"
    elif r.grad_compression == "powersgd":
        text += (f"; PowerSGD rank {r.powersgd_rank} (torch's powerSGD_hook): an n×m gradient is sent as P (n×r) + Q "
                 f"(m×r) when (n+m)·r·{r.powersgd_min_compression_rate:g} < n·m, the rest (every 1-D tensor) as it "
                 "is; three all-reduces per 25 MiB DDP bucket; compression traffic and FLOPs at the device's "
                 "bandwidth and fp32 peak (or its kernel launches)"
                 + ("; error feedback keeps a copy of the gradients" if r.powersgd_error_feedback else "")
                 + f"; planned in the steady state after start_powerSGD_iter={r.powersgd_start_iter}")
    return text + " (accelkit/plan/grad_comm.py)"
