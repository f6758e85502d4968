"""Layout: one parallel layout and micro-batching choice, and the rules that make it valid."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import NamedTuple, TypeGuard

from accelkit.core import Cluster, ModelSpec, Recipe, UserError, Workload
from accelkit.plan.options import PlanOptions


class Layout(NamedTuple):
    """How a step is split: dp·tp·pp·cp devices, experts over ep of the dp ranks, ZeRO stage over dp,
    ``micro_batch`` sequences per micro-batch and ``grad_accum`` micro-batches per step and dp rank;
    ``cp`` splits each sequence over that many ranks (context parallelism, ring attention) and ``vp``
    cuts every pipeline stage into that many interleaved chunks (Narayanan et al. 2021's interleaved 1F1B).
    ``recompute_every`` n, with ``recompute="full"``: only every n-th transformer block is checkpointed (torchtitan's
    ``selective_ac_option`` n; ``recompute_share``); 1, every block, is full recompute. ``shard_group`` G: hybrid
    sharding (PyTorch HSDP, DeepSpeed MiCS) — ZeRO shards the model states over G of the dp ranks (× cp) and replicates
    them over the dp/G groups; None shards over all dp ranks.

    Ranks are placed tp innermost, then cp, then dp, then pp (Megatron's order), which decides which
    groups share a node."""

    dp: int
    tp: int
    pp: int
    ep: int = 1
    zero: int = 0
    micro_batch: int = 1
    grad_accum: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    cp: int = 1
    vp: int = 1
    recompute_every: int = 1
    shard_group: int | None = None

    @property
    def num_devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def shard_ranks(self) -> int:
        """Ranks ZeRO shards the model states over: the shard group's dp ranks × cp (dp·cp without hybrid sharding)."""
        return (self.shard_group or self.dp) * self.cp

    @property
    def replicas(self) -> int:
        """Groups the shards are replicated over under hybrid sharding: dp / shard_group (1 without it)."""
        return self.dp // (self.shard_group or self.dp)

    def to_dict(self) -> dict[str, object]:
        return self._asdict()


def is_int(value: object) -> TypeGuard[int]:
    """An int, and not a bool (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


#: the Layout fields that count something: each at least 1
COUNT_FIELDS = ("dp", "tp", "pp", "ep", "cp", "vp", "micro_batch", "grad_accum", "recompute_every")


def check_layout_fields(layout: Layout) -> None:
    """Raise UserError naming the first Layout field out of its range. ``plan(layout=...)`` takes a NamedTuple, which
    checks nothing: micro_batch=0 or grad_accum=0 raised ZeroDivisionError deep in the time model, and a negative
    count a ValueError only after the whole plan was computed (found in review)."""
    for name in COUNT_FIELDS:
        value = getattr(layout, name)
        if not is_int(value) or value < 1:
            raise UserError(f"Layout {name}={value!r} is not valid; give an integer >= 1")
    if not is_int(layout.zero) or not 0 <= layout.zero <= 3:
        raise UserError(f"Layout zero={layout.zero!r} is not valid; give a ZeRO stage 0, 1, 2 or 3")
    if layout.recompute not in ("none", "selective", "full", "budget"):
        raise UserError(f"Layout recompute={layout.recompute!r} is not valid; give 'none', 'selective' or 'full'")
    group = layout.shard_group
    if group is not None and (not is_int(group) or group < 1):
        raise UserError(f"Layout shard_group={group!r} is not valid; give an integer >= 1, or None for all dp ranks")
    if not isinstance(layout.sequence_parallel, bool):
        raise UserError(f"Layout sequence_parallel={layout.sequence_parallel!r} is not valid; give True or False")


#: the largest device count the planner accepts (2^20): trial division stays under a millisecond
MAX_DEVICES = 1 << 20


def divisors(n: int) -> list[int]:
    """Divisors of ``n`` in increasing order, by trial division up to √n (n ≤ MAX_DEVICES, so ≤ 1,024 steps)."""
    if n < 1 or n > MAX_DEVICES:
        raise UserError(f"device count {n} is outside 1 … {MAX_DEVICES:,}; give a count in that range")
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def splits_heads(model: ModelSpec, tp: int, *, train: bool = False) -> bool:
    """Whether ``tp`` ranks can split the attention: each rank gets whole query heads (heads % tp == 0) and
    whole KV heads. Inference: kv_heads % tp == 0, or tp % kv_heads == 0 with each KV head replicated on
    tp/kv_heads ranks (vLLM's rule; the memory model's max(kv_heads/tp, 1) heads per rank). Training
    (``train``): kv_heads % tp == 0 — Megatron-Core asserts num_query_groups % tp == 0, and torchtitan's
    column-parallel wk/wv would hand a rank part of a head; the vLLM rule let a training plan put 4 KV heads on
    8 ranks (found in review)."""
    kv = model.kv_heads
    return model.num_heads % tp == 0 and (kv % tp == 0 or (not train and tp % kv == 0))


def tp_choices(model: ModelSpec, cluster: Cluster, num_devices: int, *, train: bool = False) -> list[int]:
    """tp that splits the heads (``splits_heads``), divides the device count and stays inside the scale-up domain."""
    if not model.is_transformer:
        return [1]
    limit = scaleup_limit(cluster)
    return [t for t in divisors(num_devices) if t <= limit and splits_heads(model, t, train=train)]


def pp_choices(model: ModelSpec, num_devices: int) -> list[int]:
    """pp the search tries: those that divide the device count and the layers (even stages). A pinned pp may leave
    the stages uneven (``pinned_pp_fits``): the planner then plans the heaviest stage (``plan.stages.stage_layers``)."""
    if not model.is_transformer:
        return [1]
    return [p for p in divisors(num_devices) if model.num_layers % p == 0]


def pipeline_blocks(model: ModelSpec, embedding_as_layer: bool = False) -> int:
    """The blocks a pipeline partition splits: the layers, plus the embedding and the head when each counts as one
    block (``PlanOptions.pp_embedding_as_layer``)."""
    return model.num_layers + (2 if embedding_as_layer else 0)


def pinned_pp_fits(model: ModelSpec, pp: int, vp: int, num_devices: int, *, embedding_as_layer: bool = False) -> bool:
    """Whether a pp the user gave can split ``num_devices`` ranks and the layers: pp divides the count and every one
    of the pp·vp stage chunks holds at least one block. The layers need not divide evenly: Megatron-Core's
    ``decoder_first/last_pipeline_num_layers`` and ``account_for_embedding/loss_in_pipeline_split`` give the first
    and last stages fewer (Llama 3 405B: 126 layers over 16 stages, Dubey et al. 2024 §3.3.2). With the embedding
    and the head counted as blocks, a chunk may hold only one of them: the Llama 3 paper's first chunk of the first
    stage "has only the embedding", its last chunk of the last stage "only output projection and loss"."""
    if num_devices % pp:
        return False
    if not model.is_transformer:
        return pp == 1
    return pp * vp <= pipeline_blocks(model, embedding_as_layer)


def checkpointed_blocks(blocks: int, every: int) -> int:
    """Blocks of ``blocks`` that torchtitan's layer-wise selective AC (``selective_ac_option`` n) checkpoints: it counts
    the blocks it wraps, 1, 2, …, and checkpoints block k when k % n == 0 (parallelize_llama.py checkpoint_wrapper,
    torchtitan 395a526, 2024-04-18) — ⌊blocks/n⌋ of them; n = 1 checkpoints every block."""
    return blocks // every


def recompute_share(layout: Layout, blocks: int) -> float:
    """The share of a stage's ``blocks`` whose forward runs again in backward and which keep only their input:
    1 under full recompute, ⌊blocks/n⌋/blocks with ``recompute_every`` n (``checkpointed_blocks``), else 0."""
    if layout.recompute != "full":
        return 0.0
    if layout.recompute_every == 1 or blocks < 1:
        return 1.0
    return checkpointed_blocks(blocks, layout.recompute_every) / blocks


def ep_choices(model: ModelSpec, dp: int) -> list[int]:
    if model.num_experts is None:
        return [1]
    return [e for e in divisors(dp) if model.num_experts % e == 0]


def _int(fixed: dict[str, object], key: str) -> int | None:
    value = fixed.get(key)
    if value is None:
        return None
    if not is_int(value):
        raise UserError(f"--{key.replace('_', '-')} {value!r} is not valid; give a positive integer")
    return value


def check_context_parallel(cp: int, seq_len: int) -> None:
    """Raise UserError unless ring attention can split ``seq_len`` over ``cp`` ranks. The time model gives every rank
    1/cp of the causal work, which is ring attention with load balancing (Megatron-Core / Transformer Engine): the
    sequence is cut into 2·cp chunks and each rank takes chunks i and 2·cp−1−i, so seq_len % (2·cp) must be 0."""
    if cp > 1 and seq_len % (2 * cp):
        fit = -(-seq_len // (2 * cp)) * 2 * cp
        raise UserError(f"--cp {cp} needs --seq-len divisible by 2·cp = {2 * cp} (load-balanced ring attention cuts each "
                        f"sequence into 2·cp chunks, two per rank); --seq-len {seq_len} is not: use a multiple of "
                        f"{2 * cp} such as {fit}, or a smaller --cp")


def interleaving_fits(pp: int, vp: int, grad_accum: int) -> bool:
    """Whether interleaved 1F1B can run ``grad_accum`` micro-batches per step: Megatron-LM's interleaved schedule
    needs a multiple of pp ("number of microbatches is not divisible by pipeline-model-parallel-size when using
    interleaved schedule"); plain 1F1B (vp 1) takes any count."""
    return vp == 1 or grad_accum % pp == 0


def check_interleaving(layout: Layout) -> None:
    """Raise UserError for an interleaved layout whose micro-batches per step the schedule cannot run."""
    if not interleaving_fits(layout.pp, layout.vp, layout.grad_accum):
        raise UserError(f"--vp {layout.vp}: interleaved 1F1B needs the micro-batches per step ({layout.grad_accum}) to "
                        f"be a multiple of --pp {layout.pp} (Megatron-LM's interleaved schedule); change the global "
                        "batch or the micro-batch, or use --vp 1")


def scaleup_limit(cluster: Cluster) -> int:
    """The largest tp: the scale-up domain (NVLink/xGMI), or one node of a multi-device cluster when smaller."""
    return min(cluster.node_size if cluster.num_devices > 1 else cluster.device.scaleup_domain,
               cluster.device.scaleup_domain)


def check_user_layout(model: ModelSpec, cluster: Cluster, fixed: dict[str, object], num_devices: int, *,
                      seq_len: int | None = None, embedding_as_layer: bool = False, train: bool = False) -> None:
    """Raise UserError for a layout field the user gave that can never work (one sentence, with the fix).
    ``seq_len``: the training sequence, which a ``cp`` above 1 must split evenly (``check_context_parallel``).
    ``embedding_as_layer``: the pipeline partition counts the embedding and the head as blocks (``pipeline_blocks``).
    ``train``: the layout trains, so tp must divide the KV heads (``splits_heads``)."""
    tp, pp, dp, ep, cp, vp = (_int(fixed, k) for k in ("tp", "pp", "dp", "ep", "cp", "vp"))
    if not model.is_transformer:
        for name, value in (("tp", tp), ("pp", pp)):
            if value not in (None, 1):
                raise UserError(f"--{name} {value} is not supported for the CNN {model.name}; it "
                                f"{'trains' if train else 'runs'} data-parallel only")
    if tp is not None:
        _check_tp(model, cluster, tp, train=train)
    if pp is not None and model.is_transformer and pp > model.num_layers:
        raise UserError(f"--pp {pp} exceeds the {model.num_layers} layers of {model.name}; a stage needs at least one layer")
    if ep is not None and ep > 1:
        if model.num_experts is None:
            raise UserError(f"--ep {ep} needs a mixture-of-experts model; {model.name} is dense")
        if model.num_experts % ep:
            raise UserError(f"--ep {ep} does not divide the {model.num_experts} experts of {model.name}; use one of "
                            f"{', '.join(str(d) for d in divisors(model.num_experts))}")
    if cp not in (None, 1) and not model.is_transformer:
        raise UserError(f"--cp {cp} needs a transformer; {model.name} has no sequence to split")
    if cp is not None and seq_len is not None:
        check_context_parallel(cp, seq_len)
    if vp not in (None, 1):
        _check_vp(model, pp, vp, embedding_as_layer)
    _check_device_count(dp, tp, pp, cp, num_devices, train=train)
    every = _int(fixed, "recompute_every")
    if every not in (None, 1):
        _check_recompute_every(model, fixed.get("recompute"), every)
    group = _int(fixed, "shard_group")
    if group is not None:
        _check_shard_group(group, dp, ep, cp, fixed.get("zero"))
    if fixed.get("sequence_parallel") and tp == 1:
        raise UserError("--sequence-parallel needs --tp > 1 (it splits the tensor-parallel group's work)")


def _check_tp(model: ModelSpec, cluster: Cluster, tp: int, *, train: bool = False) -> None:
    """A given tp splits the attention heads (and whole KV heads: ``splits_heads``) and fits the scale-up domain."""
    heads, domain = model.num_heads, cluster.device.scaleup_domain

    def ok() -> str:  # the values offered pass every rule here (whole KV heads too): Qwen2.5 7B's --tp 8 offered 7,
        # which divides its 28 query heads but not its 4 KV heads — refused in turn by the KV-head rule
        return ", ".join(str(d) for d in divisors(heads) if splits_heads(model, d, train=train) and d <= domain)

    if model.is_transformer and heads % tp:
        raise UserError(f"--tp {tp} does not divide the {heads} attention heads of {model.name}; use one of {ok()}")
    if tp > domain:  # before the KV-head rule: a tp past the fabric is refused whatever the heads
        raise UserError(f"--tp {tp} exceeds the scale-up domain of {cluster.device.name} "
                        f"({domain} devices); tensor parallelism needs the fast fabric")
    if model.is_transformer and not splits_heads(model, tp, train=train):
        kv = model.kv_heads
        if train:
            raise UserError(f"--tp {tp} does not divide the {kv} KV heads of {model.name}, which training shards whole "
                            f"(Megatron-Core: num_query_groups % tp == 0); use one of {ok()}")
        raise UserError(f"--tp {tp} neither divides nor is a multiple of the {kv} KV heads of {model.name} "
                        f"(a rank holds whole KV heads: kv_heads % tp == 0 or tp % kv_heads == 0); use one of {ok()}")


def _check_vp(model: ModelSpec, pp: int | None, vp: int, embedding_as_layer: bool = False) -> None:
    """Virtual stages (vp > 1) interleave a pipeline, each chunk at least one block (a layer, or with
    ``embedding_as_layer`` the embedding or the head alone)."""
    if pp is None or pp == 1:
        raise UserError(f"--vp {vp} needs --pp > 1 (virtual stages interleave a pipeline)")
    blocks = pipeline_blocks(model, embedding_as_layer)
    if model.is_transformer and pp * vp > blocks:
        what = f"{model.num_layers} layers + the embedding and the head" if embedding_as_layer else \
            f"{model.num_layers} layers"
        raise UserError(f"--pp {pp} × --vp {vp} = {pp * vp} stage chunks exceed the {what} of {model.name} (a chunk "
                        "needs at least one block); use a smaller --vp or --pp")


def _check_recompute_every(model: ModelSpec, recompute: object, every: int) -> None:
    """Checkpointing every n-th block (n > 1) needs full recompute of those blocks, transformer blocks, and n within
    the layers (beyond them no block is checkpointed)."""
    if not model.is_transformer:
        raise UserError(f"--recompute-every {every} checkpoints every n-th transformer block; the CNN {model.name} "
                        "has none — use --recompute full or none")
    if recompute != "full":
        given = "no --recompute" if recompute is None else f"--recompute {recompute}"
        raise UserError(f"--recompute-every {every} checkpoints one block in {every} in full and needs --recompute full; "
                        f"{given} was given — add --recompute full, or drop --recompute-every")
    if every > model.num_layers:
        raise UserError(f"--recompute-every {every} exceeds the {model.num_layers} layers of {model.name}, so no block "
                        "would be checkpointed; use --recompute none, or a smaller --recompute-every")


def _check_shard_group(group: int, dp: int | None, ep: int | None, cp: int | None, zero: object) -> None:
    """Hybrid sharding: the shard group divides dp; below dp it needs ZeRO 1-3 (there is nothing to shard at 0) and
    no expert parallelism (the experts' own data-parallel group is not split into shard groups here); a group of one
    rank (without cp) shards nothing."""
    if group == 1 and (cp or 1) == 1 and dp != 1:
        raise UserError("--shard-group 1 shards the model states over one rank, which is plain data parallelism; "
                        "use --zero 0 without --shard-group, or a group of 2 or more")
    if dp is not None and dp % group:
        ok = ", ".join(str(d) for d in divisors(dp))
        raise UserError(f"--shard-group {group} does not divide --dp {dp}; the shards are replicated over dp / "
                        f"shard-group groups — use one of {ok}")
    hybrid = dp is None or group < dp
    if hybrid and zero == 0:
        raise UserError(f"--shard-group {group} shards ZeRO's model states and needs --zero 1, 2 or 3; --zero 0 shards "
                        "nothing — give --zero 3 (HSDP) or drop --shard-group")
    if hybrid and ep not in (None, 1):
        raise UserError(f"--shard-group {group} with --ep {ep} is not modelled (hybrid sharding of the experts' "
                        "data-parallel group); drop one of them")


def _check_device_count(dp: int | None, tp: int | None, pp: int | None, cp: int | None, num_devices: int, *,
                        train: bool = True) -> None:
    """The given dp·tp·pp·cp divides the device count (equals it when dp, tp and pp are all given). Inference has
    no cp (refused above 1): its product is dp·tp·pp, dp replicas of tp·pp devices each."""
    product = 1
    for v in (dp, tp, pp, cp):
        if v is not None:
            product *= v
    what = "dp·tp·pp·cp" if train else "dp·tp·pp (dp replicas of tp·pp devices each)"
    if num_devices % product:
        more = -(-num_devices // product) * product
        raise UserError(f"{what} = {product} does not divide --num-devices {num_devices}; give --num-devices {more} "
                        f"(or another multiple of {product}), or sizes whose product divides {num_devices}")
    if dp is not None and tp is not None and pp is not None and product != num_devices:  # cp not given: searched as 1
        raise UserError(f"{what} = {product} but --num-devices is {num_devices}; they must be equal")


#: layout fields only training uses: the inference model (plan/evaluate.py infer_memory, plan/time.py infer_time)
#: has no optimizer states, micro-batches, saved activations or sequence-parallel regions to apply them to
TRAIN_ONLY_FIELDS = ("zero", "micro_batch", "recompute", "recompute_every", "sequence_parallel", "shard_group")


#: fields whose flag is spelled apart from the field (the bytes fields take a size: ``--kv-cache-memory 4GiB``)
FLAG_NAMES = {"kv_cache_memory_bytes": "kv-cache-memory", "overhead_bytes": "overhead"}


def flag_text(key: str, value: object) -> str:
    """How a user gave a field on the command line: ``--micro-batch 4``, ``--sequence-parallel``, ``--no-offload``."""
    name = FLAG_NAMES.get(key) or key.replace("_", "-")
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no-{name}"
    return f"--{name} {value}"


def refuse_train_only(given: Mapping[str, object], keys: Iterable[str]) -> None:
    """Raise UserError naming the first of ``keys`` in ``given``: a field only training reads, which inference
    would ignore (the layout's ``TRAIN_ONLY_FIELDS`` here, the CLI's training-only request flags there)."""
    for key in keys:
        if key in given:
            raise UserError(f"{flag_text(key, given[key])} applies to --task train; inference does not model it — drop it")


#: request fields only training reads — the optimizer's states, ZeRO-Offload, the data-parallel gradient reduction —
#: by their PlanRequest (and `accelkit plan` flag) names; a Workload carries them as ``optimizer``,
#: ``recipe.offload`` and ``recipe.grad_compression``, whose defaults follow
TRAIN_ONLY_REQUEST = ("optimizer", "offload", "grad_compression")
_TRAIN_ONLY_DEFAULTS = {"optimizer": next(f.default for f in fields(Workload) if f.name == "optimizer"),
                        **{f.name: f.default for f in fields(Recipe) if f.name in ("offload", "grad_compression")}}


def train_only_settings(workload: Workload) -> dict[str, object]:
    """The ``TRAIN_ONLY_REQUEST`` fields ``workload`` sets away from their defaults, by request field name: what an
    inference plan of it would otherwise ignore. (A default cannot be told from one given; the CLI, which sees its
    flags, refuses those as well.)"""
    values = {"optimizer": workload.optimizer, "offload": workload.recipe.offload,
              "grad_compression": workload.recipe.grad_compression}
    return {k: v for k, v in values.items() if v != _TRAIN_ONLY_DEFAULTS[k]}


def check_inference_workload(workload: Workload) -> None:
    """Raise UserError when an inference workload sets a field only training reads (``TRAIN_ONLY_REQUEST``): the
    plan would change nothing for it. ``make_context`` calls this for every plan, search and comparison, so the
    library refuses what `accelkit plan --task infer` refuses, in the same words."""
    if workload.task != "train":
        refuse_train_only(train_only_settings(workload), TRAIN_ONLY_REQUEST)


#: PlanOptions fields only the training model reads (train_memory, train_time, the activation terms): the inference
#: model (evaluate_infer, infer_time: fused kernels, no dropout, exposed tensor-parallel all-reduces, no optimizer or
#: gradient reduction) never looks at them
TRAIN_ONLY_OPTIONS = ("optimizer_states", "frozen_weights", "selective_recompute", "grad_reduce_fp32",
                      "grad_reduce_overlap", "fsdp_backward_prefetch", "autocast_fp32_params", "dropout", "fused_loss",
                      "tp_comm_overlap", "tp_backward_overlap", "pp_scatter_gather")
#: PlanOptions fields only inference reads (evaluate_infer, infer_memory, infer_time, the inference search)
INFER_ONLY_OPTIONS = ("max_serving_batch", "prefill_chunk_tokens", "max_decode_latency_s", "kv_cache_memory_bytes",
                      "gpu_memory_utilization", "block_size", "kv_cache_scales", "inflight_batching")


def refuse_infer_only(given: Mapping[str, object], keys: Iterable[str]) -> None:
    """Raise UserError naming the first of ``keys`` in ``given``: a field only inference reads, which a training plan
    would ignore (`accelkit plan` without --task infer refuses the same flags, in these words)."""
    for key in keys:
        if key in given:
            raise UserError(f"{flag_text(key, given[key])} applies to --task infer; training does not model it — drop "
                            "it, or add --task infer")


def check_task_options(workload: Workload, options: PlanOptions) -> None:
    """Raise UserError for a planner option (or a Workload field) set away from its default that the workload's task
    never reads: a training-only option on an inference plan, an inference-only one (or an fp8/int8 KV cache) on a
    training plan — the plan would be the same without it. `make_context` calls this for every plan, search and
    comparison, so the library refuses what `accelkit plan` refuses, in the same words."""
    defaults = type(options)()
    if workload.task == "train":
        given = {k: getattr(options, k) for k in INFER_ONLY_OPTIONS if getattr(options, k) != getattr(defaults, k)}
        if workload.recipe.kv_cache_dtype != "auto":
            given = {"kv_dtype": workload.recipe.kv_cache_dtype, **given}
        refuse_infer_only(given, ("kv_dtype", *INFER_ONLY_OPTIONS))
    else:
        refuse_train_only({k: getattr(options, k) for k in TRAIN_ONLY_OPTIONS
                           if getattr(options, k) != getattr(defaults, k)}, TRAIN_ONLY_OPTIONS)


def check_inference_plan_layout(layout: Layout) -> None:
    """``plan`` of an inference workload: the recipe's (or the given layout's) training-only fields set away from their
    defaults — ZeRO, micro-batch, gradient accumulation, recompute, sequence parallelism, hybrid sharding, cp, vp —
    are refused as `search(fixed=...)` and `accelkit plan --task infer` refuse them: inference plans
    ``workload.batch_size`` sequences per replica and would ignore them."""
    defaults = Layout(dp=1, tp=1, pp=1)
    given = {k: v for k, v in layout.to_dict().items() if k not in ("dp", "tp", "pp", "ep") and v != getattr(defaults, k)}
    if "grad_accum" in given:
        raise UserError(f"grad_accum={given['grad_accum']} applies to --task train (micro-batches per optimizer step); "
                        "inference plans workload.batch_size sequences per replica — drop it")
    check_inference_layout(given, None)


def check_inference_layout(fixed: dict[str, object], global_batch: int | None) -> None:
    """Raise UserError for a pinned field that inference would ignore (it would be reported but change nothing).

    Context parallelism and interleaved stages are not modelled for inference either: the inference time and
    memory take neither, so ``cp`` would only take devices from the replicas."""
    refuse_train_only(fixed, TRAIN_ONLY_FIELDS)
    if global_batch is not None:
        raise UserError(f"--global-batch {global_batch} applies to --task train; for inference give --batch "
                        "(concurrent sequences per replica)")
    for key, what in (("cp", "context-parallel"), ("vp", "interleaved-pipeline")):
        value = fixed.get(key)
        if value not in (None, 1):
            raise UserError(f"--{key} {value}: {what} inference is not modelled (its time and memory ignore it); "
                            f"drop --{key} or plan --task train")


def check_frozen(options: PlanOptions, zero: int) -> None:
    """Frozen weights (``PlanOptions.frozen_weights``, LoRA) under ZeRO-3: the planner does not model gathering
    weights that no gradient flows into, so it refuses rather than time a reduction that does not happen."""
    if options.frozen_weights and zero >= 3:
        raise UserError(f"--frozen-weights with --zero {zero} is not modelled (ZeRO-3 gathers of frozen weights); "
                        "use --zero 0, 1 or 2, which plan the same for frozen weights")


def check_selective_recompute(model: ModelSpec, options: PlanOptions, recompute: object) -> None:
    """``--selective-recompute op`` says what ``--recompute selective`` recomputes: with a pinned ``--recompute`` none
    or full, or a CNN (whose recompute is none or full), no layout reads it — refused rather than silently ignored,
    as ``--recompute-every`` without ``--recompute full`` is."""
    if options.selective_recompute != "op":
        return
    if not model.is_transformer:
        raise UserError(f"--selective-recompute op chooses what --recompute selective recomputes in a transformer "
                        f"block; the CNN {model.name} has none — drop --selective-recompute")
    if recompute not in (None, "selective"):
        raise UserError(f"--selective-recompute op chooses what --recompute selective recomputes; --recompute "
                        f"{recompute} recomputes {'nothing' if recompute == 'none' else 'every block'} — use "
                        "--recompute selective, or drop --selective-recompute")


def check_compression(recipe: Recipe, zero: int) -> None:
    """PowerSGD is a DDP communication hook: it cannot compress a ZeRO reduce-scatter."""
    if recipe.grad_compression == "powersgd" and zero > 0:
        raise UserError(f"--grad-compression powersgd is a DDP communication hook (ZeRO 0); --zero {zero} reduce-scatters "
                        "the gradients (FSDP/ZeRO), which torch's PowerSGD hook cannot compress — use --zero 0, or "
                        "--grad-compression bf16 (a reduce dtype) with ZeRO")
