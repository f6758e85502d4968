"""Predict the validation set through the planner's public API, as bands over what the sources leave out.

Every published training run is planned with ``accelkit.plan.plan(workload, cluster, options, layout=...)``, and
every serving point with ``accelkit.plan.search`` pinned to its published tensor-parallel size — what `accelkit plan
--task infer` does: at the published batch, or for a maximum-throughput figure at the largest batch that fits under
the engine's cap. A field the source
does not publish is not chosen: each of its plausible values (the run's ``unknown``) is planned and the
prediction is the band [lowest, highest] over the combinations the planner says fit in memory (all of them when
none fits — the run happened, so a planner that says otherwise is wrong about memory, not about time). The
point estimate is the band's centre in log space, √(lowest · highest), fixed before any error was looked at:
neither the planner's optimum nor its pessimum.

One unknown of serving points is narrowed by physics rather than by the planner: a KV-cache dtype under which a
published figure is faster than the cache reads alone allow at the datasheet's full HBM bandwidth did not run
(``kv_ruled_out``); the dtype is the checkpoint's, so one such row rules it out for every row of that model in the
source. It is the memory rule's counterpart for time, and, like it, never empties a band.

The free parameters (``accelkit.plan.fitted.SUSTAINED_TENSOR``, and for serving ``SERVING_ATTAINED`` under the key
``"serving:<family>"``) enter through the ``factors`` of ``Predictor.training`` / ``Predictor.serving``, which cache
every prediction by the factors it depends on, so a fit that revisits a value costs nothing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

from validation_runs.schema import ServingPoint, TrainingRun

from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.hardware import get_device
from accelkit.plan import Layout, PlanOptions, fitted, plan, search
from accelkit.plan import flops as F
from accelkit.plan.evaluate import Candidate
from accelkit.plan.memory import kv_layer_token_bytes
from accelkit.plan.priors import family

_OPTION_FIELDS = {f.name for f in fields(PlanOptions)}
_GIB = 2**30


def factor_family(device_name: str | None) -> str | None:
    """The SUSTAINED_TENSOR key a device's predictions depend on (H200 and GH200 share H100's), or None for a
    device that takes the unfitted default."""
    if device_name is None:
        return None
    fam = family(get_device(device_name))
    key = fitted.SUSTAINED_TENSOR_ALIASES.get(fam or "", fam or "")
    return key if key in fitted.SUSTAINED_TENSOR else None


#: the factors' key prefix of a SERVING_ATTAINED entry ("serving:MI300X"); a bare key is a SUSTAINED_TENSOR entry
SERVING = "serving:"


def serving_family(device_name: str) -> str | None:
    """The SERVING_ATTAINED key a serving point's prediction depends on, or None (the factor is 1)."""
    fam = family(get_device(device_name))
    return fam if fam in fitted.SERVING_ATTAINED else None


@contextmanager
def sustained(factors: Mapping[str, float]) -> Iterator[None]:
    """Plan with these SUSTAINED_TENSOR (and ``serving:`` SERVING_ATTAINED) values, restoring the shipped ones after
    (the harness re-fits them; the planner reads the tables when it builds each plan's context)."""
    tables = (fitted.SUSTAINED_TENSOR, fitted.SERVING_ATTAINED)
    saved = [dict(t) for t in tables]
    fitted.SUSTAINED_TENSOR.update({k: v for k, v in factors.items() if not k.startswith(SERVING)})
    fitted.SERVING_ATTAINED.update({k[len(SERVING):]: v for k, v in factors.items() if k.startswith(SERVING)})
    try:
        yield
    finally:
        for table, old in zip(tables, saved, strict=True):
            table.clear()
            table.update(old)


def combos(unknown: Mapping[str, tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Every combination of the plausible values, in a fixed order (keys sorted)."""
    keys = sorted(unknown)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(unknown[k] for k in keys))]


def _layout(run: TrainingRun, c: Mapping[str, Any]) -> Layout | None:
    """The layout of one combination, or None when it cannot hold the published batch (a micro-batch that does
    not divide a rank's share of it)."""
    def get(key: str) -> Any:
        return c[key] if key in c else getattr(run, key)

    tp, pp, cp = get("tp"), get("pp"), get("cp")
    dp = get("dp") or run.num_devices // (tp * pp * cp)
    mb = get("micro_batch")
    if dp * tp * pp * cp != run.num_devices or run.global_batch is None or run.global_batch % (dp * mb):
        return None
    return Layout(dp=dp, tp=tp, pp=pp, ep=get("ep"), zero=get("zero"), micro_batch=mb,
                  grad_accum=run.global_batch // (dp * mb), recompute=get("recompute"),
                  recompute_every=get("recompute_every"),
                  sequence_parallel=bool(get("sequence_parallel")), cp=cp, vp=get("vp"))


def plan_training(run: TrainingRun, c: Mapping[str, Any]) -> dict[str, Any] | None:
    """One combination planned: tokens/s per device, step time, memory; None when the planner refuses it."""
    lay = _layout(run, c)
    if lay is None or run.device is None:
        return None
    model = run.model.replace(vocab_size=c["vocab_size"]) if "vocab_size" in c else run.model
    recipe = Recipe(precision=run.precision, dp=lay.dp, tp=lay.tp, pp=lay.pp, ep=lay.ep, zero=lay.zero,  # type: ignore[arg-type]
                    micro_batch=lay.micro_batch, grad_accum=lay.grad_accum, recompute=lay.recompute,  # type: ignore[arg-type]
                    sequence_parallel=lay.sequence_parallel)
    workload = Workload(model=model, task="train", seq_len=run.seq_len, recipe=recipe, batch_size=run.global_batch)
    gbps = c.get("scaleout_gbps", run.scaleout_gbps) or 400.0  # a single node never uses it
    device = get_device(run.device)
    if "peak_scale" in c:  # a variant whose clocks the source does not know (Grand Teton's 500 W H100): its peaks
        device = device.replace(peak_flops={k: v * c["peak_scale"] for k, v in device.peak_flops.items()})
    cluster = Cluster(device=device, num_devices=run.num_devices,
                      devices_per_node=min(8, run.num_devices), scaleout_bandwidth_bytes_per_s=gbps / 8 * 1e9)
    options = PlanOptions(use_calibration=False, **run.stack, **{k: v for k, v in c.items() if k in _OPTION_FIELDS})
    try:
        d = plan(workload, cluster, options, layout=lay).details
    except UserError as err:
        return {"refused": str(err)}
    return {"tokens_per_s_per_device": d["tokens_per_s_per_device"], "step_time_s": d["step_time_s"],
            "fits": d["fits"], "memory_gib": d["memory_per_device_bytes"]["total"] / _GIB}


def _serving_options(point: ServingPoint, c: Mapping[str, Any], workload: Workload, cluster: Cluster) -> PlanOptions:
    """The engine's batch cap and memory rule as planner options: vLLM's gpu_memory_utilization f leaves (1 − f)
    of the device to nothing (weights, activations and KV cache share f); TensorRT-LLM's
    kv_cache_free_gpu_mem_fraction f gives the KV cache f of what weights and activations leave free."""
    cap = c.get("max_batch", point.max_batch) or PlanOptions().max_serving_batch
    frac = c.get("memory_fraction", point.memory_fraction)
    # vLLM's and TensorRT-LLM's fp8 KV caches keep one scale per layer tensor, not accelkit serve's per token and head.
    # TensorRT-LLM batches in flight (new requests' context phase runs in the same iteration as the others'
    # generation); that matters where requests keep arriving — the offline maximum throughput and ITL under
    # concurrency — not for a static batch's latency, nor for vLLM, whose 2024 engine ran prefill steps apart
    inflight = "TensorRT-LLM" in point.engine and point.metric in ("output_tokens_per_s", "itl_s")
    base = PlanOptions(use_calibration=False, max_serving_batch=cap, kv_cache_scales="per-tensor",
                       inflight_batching=inflight)
    if frac is None or point.memory_rule == "none":
        return base
    capacity = cluster.device.memory_bytes
    if point.memory_rule == "vllm":
        return base.replace(overhead_bytes=round((1 - frac) * capacity))
    # weights and activations at the batch cap (the activations are one prefill chunk's: the cap fills it)
    mem = _infer(workload, cluster, base.replace(overhead_bytes=0), point.tp, cap).memory
    return base.replace(overhead_bytes=round((1 - frac) * (capacity - mem["weights"] - mem["activations"])))


def _infer(workload: Workload, cluster: Cluster, options: PlanOptions, tp: int, batch: int | None) -> Candidate:
    """`accelkit plan --task infer` at tp ranks: at ``batch``, or — for an offline maximum-throughput figure —
    without one, so the planner takes the largest batch that fits, capped by ``max_serving_batch``."""
    return search(workload, cluster, options=options, fixed={"dp": 1, "tp": tp, "pp": 1}, batch=batch, top=1)[0]


def plan_serving(point: ServingPoint, c: Mapping[str, Any]) -> dict[str, Any] | None:
    """One combination planned at the published lengths, batch and precision; the figure the source measured."""
    kv = c.get("kv_cache_dtype", point.kv_cache_dtype)
    recipe = Recipe(precision="bf16", quantization="fp8-dynamic" if point.weights == "fp8" else None,  # type: ignore[arg-type]
                    tp=point.tp, kv_cache_dtype=kv)  # type: ignore[arg-type]
    batch = 1 if point.metric == "ttft_s" else point.batch
    workload = Workload(model=point.model, task="infer", prompt_len=point.prompt_len, output_len=point.output_len,
                        batch_size=batch or 1, recipe=recipe)
    cluster = Cluster(device=get_device(point.device), num_devices=point.tp)
    try:
        cand = _infer(workload, cluster, _serving_options(point, c, workload, cluster), point.tp, batch)
    except UserError as err:
        return {"refused": str(err)}
    value = {"ttft_s": cand.prefill_time_s, "itl_s": cand.itl_s, "batch_latency_s": cand.step_time_s,
             "output_tokens_per_s": cand.tokens_per_s}[point.metric]
    return {"value": value, "batch": cand.batch, "max_batch": cand.max_batch, "fits": cand.fits}


def kv_read_bytes(point: ServingPoint, kv_dtype: str) -> float:
    """Bytes of K and V one sequence's decode steps read on one rank, at the least: decode step k (k = 1 … output −
    1; the first output token comes from the prefill) attends over prompt + k cached tokens, and reads at least the
    prompt + k − 1 written before it, once per layer — the 8 KV heads of a GQA group once, as TensorRT-LLM's XQA and
    vLLM's paged kernels do (GQA's point) — kv_heads/tp of them per rank, at the dtype's bytes (per-tensor scales)."""
    m = point.model
    per_token = kv_layer_token_bytes(m, kv_cache_dtype=kv_dtype, dtype_bytes=2, tp=point.tp,
                                     kv_scales="per-tensor")
    steps = point.output_len - 1
    if m.sliding_window is None:  # Σ_k (prompt + k − 1), closed form
        tokens = m.num_layers * (steps * point.prompt_len + steps * (steps - 1) / 2)
    else:
        tokens = sum(m.kv_cache_layer_tokens(point.prompt_len + k - 1) for k in range(1, steps + 1))
    return float(tokens * per_token)


def kv_read_bound(point: ServingPoint, kv_dtype: str) -> float | None:
    """The published metric's physical limit under a KV-cache dtype, from the KV reads alone at the datasheet's full
    HBM bandwidth (weights, matmuls, prefill and every efficiency left out, so a true bound whatever the planner
    assumes): the most output tokens/s, or the least seconds (ITL at the mean step, a batch's latency); None for
    TTFT, which reads no cache it has not just written."""
    bw = get_device(point.device).memory_bandwidth_bytes_per_s
    per_seq = kv_read_bytes(point, kv_dtype)
    steps = point.output_len - 1
    if point.metric == "ttft_s" or steps <= 0:
        return None
    if point.metric == "output_tokens_per_s":  # every output token of the run costs per_seq / output_len per rank
        return float(bw * point.output_len / per_seq)
    batch = point.batch or 1
    if point.metric == "itl_s":
        return float(batch * per_seq / steps / bw)
    return float(batch * per_seq / bw)  # batch_latency_s: the whole batch's decode


def _beyond(point: ServingPoint, bound: float | None) -> bool:
    """Whether the published figure is faster than ``bound`` allows."""
    if bound is None:
        return False
    return point.value > bound if point.metric == "output_tokens_per_s" else point.value < bound


def kv_ruled_out(points: Sequence[ServingPoint]) -> dict[tuple[str, str, str], dict[str, str]]:
    """KV-cache dtypes that cannot have run, per (source, model, weights): those under which some published figure
    of the group beats ``kv_read_bound`` — the run happened, so a dtype whose cache reads alone need more time than
    the figure took at full datasheet bandwidth was not the one used (the same rule that drops combinations the
    planner says do not fit). The dtype is the checkpoint's and the command's, the same for every row of a model's
    table (one checkpoint per model, one trtllm-bench command per table), so one impossible row rules it out for the
    group. Never every dtype: if none is possible the planner's bytes are wrong, not the run, and all are kept.
    Values: how many of the group's rows rule the dtype out, and the furthest beyond its bound."""
    beyond: dict[tuple[str, str, str], dict[str, list[tuple[float, ServingPoint, float]]]] = {}
    dtypes: dict[tuple[str, str, str], set[str]] = {}
    for p in points:
        key = (p.source, p.model.name, p.weights)
        for dtype in p.unknown.get("kv_cache_dtype", ()):
            dtypes.setdefault(key, set()).add(dtype)
            bound = kv_read_bound(p, dtype)
            if _beyond(p, bound):
                assert bound is not None
                ratio = p.value / bound if p.metric == "output_tokens_per_s" else bound / p.value
                beyond.setdefault(key, {}).setdefault(dtype, []).append((ratio, p, bound))
    out: dict[tuple[str, str, str], dict[str, str]] = {}
    for key, gone in beyond.items():
        if not dtypes[key] - gone.keys():
            continue
        rows = sum(1 for p in points if (p.source, p.model.name, p.weights) == key and "kv_cache_dtype" in p.unknown)
        for dtype, hits in gone.items():
            ratio, p, bound = max(hits, key=lambda h: h[0])
            fmt = ",.0f" if p.metric == "output_tokens_per_s" else ".4g"
            out.setdefault(key, {})[dtype] = (
                f"{len(hits)} of {rows} rows are beyond what their {dtype} KV reads allow at full HBM bandwidth; "
                f"the furthest, {p.id}: published {p.value:{fmt}} {p.metric} against a bound of {bound:{fmt}} "
                f"(×{ratio:.2f})")
    return out


@dataclass(frozen=True)
class Band:
    """The planner's range over a record's plausible combinations."""

    low: float
    high: float
    planned: int  # combinations planned
    fitting: int  # of those, the ones the planner says fit (the band uses only these when any does)
    low_combo: dict[str, Any]
    high_combo: dict[str, Any]
    refused: str | None  # the planner's message when it refused every combination
    memory_gib: float = math.nan  # the smallest planned per-device memory (GiB) over the combinations (training)

    @property
    def centre(self) -> float:
        return math.sqrt(self.low * self.high)

    def to_json(self) -> dict[str, Any]:
        doc = {"low": self.low, "high": self.high, "centre": self.centre, "planned": self.planned,
               "fitting": self.fitting, "low_combo": self.low_combo, "high_combo": self.high_combo}
        if not math.isnan(self.memory_gib):
            doc["memory_gib"] = self.memory_gib
        return doc


def band(results: list[tuple[dict[str, Any], dict[str, Any] | None]], key: str) -> Band:
    """The band over planned combinations (``key``: the predicted figure in each result)."""
    planned = [(c, r) for c, r in results if r is not None and "refused" not in r]
    if not planned:
        refusals = [r["refused"] for _, r in results if r is not None and "refused" in r]
        return Band(math.nan, math.nan, 0, 0, {}, {}, refusals[0] if refusals else "no combination holds the batch")
    fitting = [(c, r) for c, r in planned if r["fits"]]
    pool = fitting or planned
    lo = min(pool, key=lambda cr: cr[1][key])
    hi = max(pool, key=lambda cr: cr[1][key])
    memory = min((r["memory_gib"] for _, r in planned if "memory_gib" in r), default=math.nan)
    return Band(lo[1][key], hi[1][key], len(planned), len(fitting), lo[0], hi[0], None, memory)


class Predictor:
    """Bands of the training runs and serving points at given SUSTAINED_TENSOR values, cached by the one value
    each record depends on."""

    def __init__(self, serving_points: Sequence[ServingPoint] | None = None) -> None:
        self._cache: dict[tuple[str, float | None, float | None], Band] = {}
        if serving_points is None:
            from validation_runs import SERVING
            serving_points = SERVING
        self.kv_ruled_out = kv_ruled_out(serving_points)

    def ruled_out(self, point: ServingPoint) -> dict[str, str]:
        """The KV-cache dtypes ``kv_ruled_out`` excludes for this point's group, each with the row that excludes it."""
        return self.kv_ruled_out.get((point.source, point.model.name, point.weights), {})

    def _key(self, rid: str, device: str | None, factors: Mapping[str, float],
             serving: bool = False) -> tuple[str, float | None, float | None]:
        fam = factor_family(device)
        tensor = None if fam is None else factors.get(fam, fitted.SUSTAINED_TENSOR[fam])
        sfam = serving_family(device) if serving and device is not None else None
        attained = None if sfam is None else factors.get(SERVING + sfam, fitted.SERVING_ATTAINED[sfam])
        return rid, tensor, attained

    def training(self, run: TrainingRun, factors: Mapping[str, float]) -> Band:
        key = self._key(run.id, run.device, factors)
        if key not in self._cache:
            with sustained(factors):
                results = [(c, plan_training(run, c)) for c in combos(run.unknown)]
            self._cache[key] = band(results, "tokens_per_s_per_device")
        return self._cache[key]

    def serving(self, point: ServingPoint, factors: Mapping[str, float]) -> Band:
        key = self._key(point.id, point.device, factors, serving=True)
        if key not in self._cache:
            with sustained(factors):
                gone = self.ruled_out(point)
                results = [(c, plan_serving(point, c)) for c in combos(point.unknown)
                           if c.get("kv_cache_dtype") not in gone]
            self._cache[key] = band(results, "value")
        return self._cache[key]


def published_tokens_per_device(run: TrainingRun) -> float:
    """The published figure as tokens/s per device (schema.PublishedKind says how each kind converts)."""
    p, m = run.published, run.model
    if p.kind == "tokens_per_s_per_device":
        return p.value
    if p.kind == "tokens_per_s_total":
        return p.value / run.num_devices
    if p.kind == "tflops_per_device":
        return p.value * 1e12 / (F.training_flops(m, batch=1, seq=run.seq_len) / run.seq_len)  # model FLOPs per token
    if p.kind == "step_time_s":
        assert run.global_batch is not None
        return run.global_batch * run.seq_len / p.value / run.num_devices
    # megatron_pflops_total: Equation 3 of arXiv 2104.04473, F = 96·B·s·l·h²·(1 + s/6h + V/16lh) per step
    s = run.seq_len
    per_token = 96 * m.num_layers * m.hidden_size**2 * (1 + s / (6 * m.hidden_size)
                                                         + m.vocab_size / (16 * m.num_layers * m.hidden_size))
    return p.value * 1e15 / run.num_devices / per_token


def speed_error(point: ServingPoint, predicted: float) -> float:
    """Positive = the planner is optimistic: a time predicted shorter, or a throughput higher, than published."""
    return predicted / point.value - 1 if point.metric == "output_tokens_per_s" else point.value / predicted - 1
