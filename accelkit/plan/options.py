"""PlanOptions: what the planner assumes beyond the workload and the cluster. Each default is stated in
the plan's ``assumptions``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from accelkit.core.serving_memory import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_MEMORY_UTILIZATION, KVScales
from accelkit.core.spec import Spec, spec_field


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanOptions(Spec):
    """Knobs of the planner's model of the system (not of the workload)."""

    attention: Literal["flash", "flash2", "flash1", "flash-triton", "math"] = spec_field(
        "flash", doc="Attention kernel: flash (the device generation's best fused kernel: FlashAttention-3/cuDNN on "
                     "Hopper, FlashAttention-2 on Ampere), flash2 (FlashAttention-2 everywhere), flash1 "
                     "(FlashAttention-1, the 2022 CUDA kernels: FA2 ÷ 2), flash-triton "
                     "(FlashAttention in pre-MLIR Triton, e.g. MPT's attn_impl triton: FA2 ÷ 1.83) or math "
                     "(unfused, s² scores in memory, e.g. Megatron 2022)."
    )
    kernels: Literal["eager", "fused"] = spec_field(
        "eager", doc="eager: PyTorch eager modules (HF, torchtitan: RMSNorm upcasts in 6 kernels, rotate_half rotary); "
                     "fused: Megatron / Transformer Engine / compiled kernels (one kernel per norm, rotary, activation)."
    )
    dropout: bool | None = spec_field(
        None, doc="Dropout in training; None = the architecture's Hugging Face default (GPT-2, BERT, ViT: on)."
    )
    autocast_fp32_params: bool = spec_field(
        False, doc="Autocast over fp32 parameters (PyTorch AMP without FSDP param_dtype; Composer ≤ 0.13 FSDP mixed "
                   "precision DEFAULT): each forward casts every weight (read 4 B, write 2 B) and FSDP gathers fp32."
    )
    fsdp_backward_prefetch: Literal["pre", "post"] = spec_field(
        "pre", doc="ZeRO-3/FSDP backward all-gather: pre (BACKWARD_PRE, FSDP1's default; FSDP2) overlaps the next "
                   "gather with the current gradient computation; post (BACKWARD_POST, Composer's FSDP default) "
                   "issues it after, so backward waits for every gather (torch.distributed.fsdp.BackwardPrefetch)."
    )
    fused_loss: bool | None = spec_field(
        None, doc="Cross-entropy in one fused kernel (read logits, write their gradient); None = as the kernel stack "
                  "(fused: yes, eager: fp32 log-softmax in separate kernels)."
    )
    tp_comm_overlap: bool = spec_field(
        False, doc="Tensor-parallel collectives overlap the neighbouring matmuls (Transformer Engine userbuffers); "
                   "off: they are exposed."
    )
    tp_backward_overlap: bool = spec_field(
        False, doc="Only the backward tensor-parallel collectives overlap, with the weight-gradient matmuls of the "
                   "column-parallel layers (Megatron-LM's async all-reduce, Korthikanti et al. 2022 §6.2)."
    )
    pp_scatter_gather: bool = spec_field(
        False, doc="Pipeline sends between nodes carry 1/tp of the activation each and are all-gathered over the "
                   "scale-up fabric (Megatron-LM's scatter/gather, Narayanan et al. 2021 §4.1); sequence "
                   "parallelism already splits them."
    )
    pp_embedding_as_layer: bool = spec_field(
        False, doc="The pipeline partition counts the embedding and the LM head as one block each, so the first and "
                   "last stages hold one block fewer (Megatron-DeepSpeed --pp-partition-method "
                   "'type:transformer|embedding'); an interleaved chunk may then hold the embedding or the head alone "
                   "(Llama 3 405B: pp 16 × vp 8 over 126 layers); off: L/pp blocks per stage, the head added to the last."
    )
    grad_reduce_overlap: bool = spec_field(
        True, doc="ZeRO 0-2: the gradient reduction overlaps the backward (bucketed, PyTorch DDP; ZeRO 0-1 the last "
                  "micro-batch's, ZeRO 2 every micro-batch's); "
                  "off: it runs after the backward, exposed (Megatron-LM 2021-22 local DDP)."
    )
    grad_reduce_fp32: bool = spec_field(
        False, doc="Mixed precision reduces the gradients in fp32: PyTorch DDP over fp32 parameters with autocast, FSDP2 "
                   "MixedPrecisionPolicy(reduce_dtype=float32) (torchtitan's default), Megatron's fp32 gradient "
                   "accumulation; off: in the weight dtype, as the ZeRO paper counts them. --grad-compression "
                   "bf16/fp16 halves what is reduced only when this is on (or the precision is fp32)."
    )
    optimizer_states: Literal["fp32", "bf16"] = spec_field(
        "fp32", doc="Training: the optimizer's states — fp32 m, v and master weights (PyTorch, Megatron-Core, DeepSpeed; "
                    "the ZeRO paper's K = 12) or bf16 (Apex DistributedFusedAdam with dtype bf16, NeMo's "
                    "`optim.dtype: bf16`: m, v and its copy of the weights in bf16, 6 B per parameter)."
    )
    selective_recompute: Literal["attention", "op"] = spec_field(
        "attention", doc="What --recompute selective recomputes: attention (Megatron-LM's: the attention core's s² "
                         "scores, which flash kernels never store) or op (torchtitan's op-level policy: every compute "
                         "op's output is saved except every second matmul of a block, which backward recomputes with "
                         "the block's pointwise ops)."
    )
    fp8_activations: Literal["bf16", "te"] = spec_field(
        "bf16", doc="Training at --precision fp8: what the GEMM inputs saved for backward are kept in — bf16 "
                    "(torchao.float8: the activations stay bf16) or te (Transformer Engine, with --kernels fused: the FP8 "
                    "copies its modules quantize for the GEMMs, 1 B an element; the QKV input kept column-wise only, "
                    "both copies under sequence parallelism; the fc1 input both copies, one under sequence "
                    "parallelism; the attention-projection and fc2 inputs one copy; q, k, v, the attention output, "
                    "the fc1 output and the norm inputs stay bf16)."
    )
    frozen_weights: bool = spec_field(
        False, doc="Training: the model's weights are frozen and only small adapters train (LoRA): no weight gradients, "
                   "optimizer states or data-parallel gradient reduction, and backward skips the weight-gradient "
                   "GEMMs (2 of the 3 matmul passes remain). The adapters' own parameters and GEMMs (rank ≪ hidden) "
                   "are not counted; ZeRO-3 is refused (its gathers of frozen weights are not modelled)."
    )
    activity_factor: float = spec_field(
        0.75, min=0.0, max=1.0, doc="Average power as a fraction of TDP (energy = TDP × factor × time)."
    )
    price_per_device_hour: float | None = spec_field(
        None, min=0.0, finite=True, doc="Price of one device-hour, for cost.")
    target_tokens_per_s: float | None = spec_field(
        None, min=0.0, finite=True, doc="Without a device count: the smallest count that also reaches this throughput."
    )
    max_decode_latency_s: float | None = spec_field(
        None, min=0.0, finite=True,
        doc="Inference: the most seconds a decode step (one token per sequence) may take. The search keeps layouts "
            "within it (without a device count: the smallest count that has one) and, without a batch, lowers the "
            "batch until decode meets it; when nothing does, the plan closest to it, with a warning."
    )
    overhead_bytes: int = spec_field(2 * 2**30, min=0, doc="Framework allowance per device (context, buffers).")
    max_serving_batch: int = spec_field(
        256, min=1, doc="Inference without --batch: plan at the largest batch that fits, capped here (vLLM max_num_seqs)."
    )
    prefill_chunk_tokens: int = spec_field(8192, min=1, doc="Prefill tokens processed per step (chunked prefill).")
    inflight_batching: bool = spec_field(
        False, doc="Inference: the engine runs new requests' prefill in the same iterations as the running requests' "
                   "decode (TensorRT-LLM's in-flight batching, vLLM with chunked prefill), so a step's GEMMs read the "
                   "weights once for both; off: prefill and decode run as separate steps (a static batch)."
    )
    kv_cache_memory_bytes: int | None = spec_field(
        None, min=1, doc="Inference: the KV budget `accelkit serve --kv-cache-memory` would get, for the KV tokens that "
                         "fit (kv_cache_capacity); None = as the engine: gpu_memory_utilization of the memory the "
                         "weights and the framework allowance leave on a GPU, 1 GiB on a CPU."
    )
    gpu_memory_utilization: float = spec_field(
        DEFAULT_GPU_MEMORY_UTILIZATION, min=0.01, max=1.0,
        doc="Inference without kv_cache_memory_bytes: the engine's fraction of the memory left after the weights "
            "that becomes KV cache (`accelkit serve --gpu-memory-utilization`)."
    )
    block_size: int = spec_field(
        DEFAULT_BLOCK_SIZE, min=1, max=1024, doc="Inference: tokens per KV block (`accelkit serve --block-size`)."
    )
    kv_cache_scales: KVScales = spec_field(
        "per-token-head", doc="Inference, fp8/int8 KV cache: per-token-head = accelkit serve's float16 scale per "
                              "token and KV head in the cache (head_dim + 2 bytes per head and token); per-tensor = "
                              "one scale per layer tensor outside it, as vLLM and TensorRT-LLM keep (1 byte per "
                              "element)."
    )
    use_calibration: bool = spec_field(True, doc="Use this machine's `hw probe` results when they match the hardware.")
    max_devices: int = spec_field(65536, min=1, max=1 << 20, doc="Largest device count the minimum-count search tries.")
