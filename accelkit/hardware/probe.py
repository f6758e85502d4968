"""`accelkit hw probe`: measure this device's roofline — dense matmul throughput per dtype and memory
bandwidth — and compare it with the catalog peak. On a CPU there is no datasheet, so the measured
matmul peak is the only "peak" there is; MFU on CPU divides by it (docs/methodology.md, "MFU")."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from accelkit.core import DeviceSpec, Measurement, UserError, summarize
from accelkit.core.spec import Spec, spec_field
from accelkit.hardware.catalog import match_device_name
from accelkit.hardware.detect import environment, this_cpu
from accelkit.hardware.device import free_memory_bytes, resolve_device
from accelkit.hardware.kernel_probe import attention_shape, probe_kernels
from accelkit.hardware.probe_quality import copy_quality, default_sizes, matmul_quality, mib, probe_quality
from accelkit.timing import LoopConfig, LoopResult, time_loop
from accelkit.timing.loop import MAX_TIME_S

CPU_DTYPES = ("fp32", "bf16", "fp16")
#: what a CPU probe measures when it is not told which dtypes (fp16 matmuls are slow there)
CPU_DEFAULT_DTYPES = ("fp32", "bf16")
#: a CPU dtype whose default-side matmul would take longer than this a call has no fast kernel there (fp16 on a CPU
#: without AVX512-FP16 or AMX-FP16: 0.24 GFLOP/s, 70 s a 2048² call, 9 min for a quick probe's eight calls): it is
#: probed at the largest side from SCOUT_SIDE up, doubling, whose call takes at most this long (cpu_side_for)
SLOW_CALL_S = 1.0
SCOUT_SIDE = 256
CUDA_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
#: seconds each timed loop of a full (not --quick) probe measures
FULL_MIN_TIME_S = 3.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeConfig(Spec):
    """What `hw probe` measures and for how long."""

    device: str = spec_field("auto", doc="'auto' (first GPU, else CPU), 'cpu', or 'cuda[:N]'.")
    dtypes: tuple[str, ...] | None = spec_field(
        None, doc="Matmul dtypes; None = fp32 and bf16 on CPU, every supported one on GPUs."
    )
    quick: bool = spec_field(False, doc="Short loops (a smoke run in seconds; percentiles unbacked).")
    matmul_size: int | None = spec_field(None, min=64, max=32768, doc="Square matmul side; None = 2048 CPU, 8192 GPU.")
    copy_bytes: int | None = spec_field(None, min=1 << 20, max=1 << 36,
                                        doc="Copy buffer bytes; None = 256 MiB CPU, 2 GiB GPU.")
    min_time_s: float | None = spec_field(
        None, min=0.0, max=MAX_TIME_S, doc="Seconds each timed loop measures (its warm-up at most as long); None = "
        f"{LoopConfig.quick().min_time_s:g} with quick, else {FULL_MIN_TIME_S:g}. Under {FULL_MIN_TIME_S:g} the probe "
        "is stored as a quick one.")

    @property
    def short(self) -> bool:
        """Loops shorter than a full probe's (``quick``, or ``min_time_s`` under the full loop's): its figures are
        stored as a quick probe's, never ranked as a full one."""
        return self.quick or (self.min_time_s is not None and self.min_time_s < FULL_MIN_TIME_S)

    @property
    def loop(self) -> LoopConfig:
        base = LoopConfig.quick() if self.quick else LoopConfig(min_time_s=FULL_MIN_TIME_S, min_iterations=20)
        if self.min_time_s is None:
            return base
        return replace(base, min_time_s=self.min_time_s, warmup_time_s=min(base.warmup_time_s, self.min_time_s))


def quick_probe_min_time(loop_min_time_s: float) -> float | None:
    """The ``min_time_s`` of a quick probe run for a measurement whose own loops measure ``loop_min_time_s``: as
    short as those when they are shorter than a quick probe's (`bench --min-time 0.1`), else None (the quick
    probe's own)."""
    return loop_min_time_s if loop_min_time_s < LoopConfig.quick().min_time_s else None


def peak_bytes(device: str, size: int, copy_bytes: int) -> int:
    """The most the probe holds at once: its phases run one after another and each frees its buffers first.

    matmul: a, b and the output in fp32 (the widest dtype); copy: src + dst; elementwise add: a, b, c of
    ``copy_bytes`` each on a CPU (fp32), half that in bf16 on a GPU (kernel_probe.probe_kernels); attention:
    q, k, v, their gradients, the output and its gradient (8 tensors of the attention shape)."""
    wide = 4 if device == "cpu" else 2
    elementwise = 3 * max(1 << 16, copy_bytes // 4) * wide
    a = attention_shape(device)
    attention = 8 * a["batch"] * a["heads"] * a["seq"] * a["head_dim"] * wide
    return max(3 * size * size * 4, 2 * copy_bytes, elementwise, attention)


def _check_memory(device: str, size: int, copy_bytes: int) -> None:
    """Refuse sizes the device cannot hold before allocating (an OOM kill would lose the whole probe)."""
    need = peak_bytes(device, size, copy_bytes)
    free = free_memory_bytes(device)
    if need > 0.9 * free:
        raise UserError(f"--size {size} / --copy-size {copy_bytes >> 20} MiB need {need / 2**30:.1f} GiB but {device} has "
                        f"{free / 2**30:.1f} GiB free; use a smaller --size or --copy-size")


def supported_dtypes(device: str) -> dict[str, str | None]:
    """dtype → None if this device can run it, else the reason it cannot."""
    import torch

    if device == "cpu":
        reasons: dict[str, str | None] = {d: None for d in CPU_DTYPES}
        reasons["tf32"] = "tf32 is a tensor-core mode of NVIDIA Ampere and newer GPUs; a CPU has no tf32"
        reasons["fp8"] = "fp8 matmuls need an NVIDIA SM89+ or AMD MI300-class GPU; this is a CPU"
        return reasons
    props = torch.cuda.get_device_properties(device)
    is_rocm = torch.version.hip is not None
    cc = (props.major, props.minor)
    arch = getattr(props, "gcnArchName", "") or ""
    return {
        "fp32": None,
        "fp16": None,
        "bf16": None if is_rocm or cc >= (8, 0) else f"bf16 needs SM80+; {props.name} is SM{cc[0]}{cc[1]}",
        "tf32": None if not is_rocm and cc >= (8, 0) else "tf32 needs an NVIDIA SM80+ GPU",
        "fp8": None
        if (not is_rocm and cc >= (8, 9)) or (is_rocm and "gfx94" in arch)
        else f"fp8 matmul needs SM89+ (Ada/Hopper/Blackwell) or MI300-class; {props.name} is not",
    }


def _matmul_fn(dtype: str, n: int, device: str) -> Callable[[], object]:
    import torch

    if dtype == "fp8":
        is_rocm = torch.version.hip is not None
        f8 = torch.float8_e4m3fnuz if is_rocm else torch.float8_e4m3fn
        a = torch.randn(n, n, device=device).to(f8)
        b = torch.randn(n, n, device=device).to(f8).t()  # _scaled_mm wants column-major B
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    torch_dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(n, n, device=device, dtype=torch_dtype)
    b = torch.randn(n, n, device=device, dtype=torch_dtype)
    return lambda: torch.mm(a, b)


def cpu_side_for(dtype: str, size: int) -> tuple[int, str | None]:
    """(the side to probe ``dtype`` at on the CPU, why it is below ``size`` or None). One call each at SCOUT_SIDE,
    twice that, … up to ``size``, stopping before a side whose call would take over SLOW_CALL_S — projected as n³
    from the last call, and measured, since a kernel without blocking slows down as its matrices leave the caches
    (fp16 here: 3.3 GFLOP/s at 640², 0.24 at 2048²). At seconds a call its fixed overhead is nothing, so the smaller
    side measures the dtype's peak as well as the default would."""
    side = min(size, SCOUT_SIDE)
    fn = _matmul_fn(dtype, side, "cpu")
    fn()  # the first call allocates and picks its kernel
    call_s = _one_call_s(fn)
    while side < size:
        larger = min(size, 2 * side)
        projected_s = call_s * (larger / side) ** 3
        if projected_s <= SLOW_CALL_S:
            larger_s = _one_call_s(_matmul_fn(dtype, larger, "cpu"))
            if larger_s <= SLOW_CALL_S:
                side, call_s = larger, larger_s
                continue
        # in TFLOP/s, the unit of the table this note is printed under (it said 15.8 GFLOP/s beside 0.0193 TFLOP/s);
        # one untimed scouting call, so it differs from the table's median of the timed loop
        rate = 2 * side**3 / call_s / 1e12
        return side, (f"one {side}×{side} {dtype} matmul ran at {rate:.3g} TFLOP/s on this CPU (no fast {dtype} "
                      f"kernel): a {size}×{size} call would take {call_s * (size / side) ** 3:.0f} s or more, so it "
                      f"was probed at {side}×{side} (--size sets the side)")
    return size, None


def _one_call_s(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return max(time.perf_counter() - t0, 1e-9)


def _tf32(enabled: bool) -> Callable[[], None]:
    """Set torch's TF32 matmul flag; returns the function that restores the previous value."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    return lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", before)


def _fraction(measured: float, peak: float | None) -> float | None:
    return measured / peak if peak else None


def _time_copy(device: str, copy_bytes: int, loop: LoopConfig) -> tuple[LoopResult, int]:
    """Time ``dst.copy_(src)``; (timing, bytes moved per iteration). src and dst are freed on return, before
    the kernel probes allocate three buffers of the same size (peak_bytes counts one phase at a time)."""
    import torch

    src = torch.ones(copy_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return time_loop(lambda: dst.copy_(src), loop, device=device), 2 * src.numel() * 4  # read + write


def _note(is_catalog: bool, size: int, copy_bytes: int, default_size: int, default_copy: int, *,
          quick: bool = False, min_time_s: float | None = None) -> str | None:
    """What the figures are for: the peak MFU and the planner use, unless the sizes were below the defaults."""
    small = [f for f, is_small in ((f"--size {size} (default {default_size})", size < default_size),
                                   (f"--copy-size {mib(copy_bytes)} (default {mib(default_copy)})",
                                    copy_bytes < default_copy)) if is_small]
    if small:
        return (f"{' and '.join(small)} {'are' if len(small) > 1 else 'is'} below the default, so this probe is no "
                "peak: MFU and the planner use a probe at the default sizes, this one only while none is stored "
                "(saying so)")
    if quick:
        return ("a --quick probe: MFU, the planner and the report take a full probe's figures (the best stored), "
                "this one's only while none is stored (saying so); `accelkit hw probe` without --quick gives them")
    if min_time_s is not None and min_time_s < FULL_MIN_TIME_S:
        return (f"a --min-time {min_time_s:g} probe (a full one measures {FULL_MIN_TIME_S:g} s a loop) counts as a "
                "--quick one: MFU, the planner and the report take a full probe's figures (the best stored), this "
                "one's only while none is stored (saying so); `accelkit hw probe` without --quick gives them")
    if is_catalog:
        return None
    return "no datasheet peak for this device: these measured figures are its peak (MFU on it uses them)"


def _probed_dtypes(device: str, given: tuple[str, ...] | None) -> list[str]:
    """The dtypes to probe: those given (each one this device supports), else every supported one of the device's
    defaults."""
    support = supported_dtypes(device)
    if given is None:
        return [d for d in (CPU_DEFAULT_DTYPES if device == "cpu" else CUDA_DTYPES) if support.get(d) is None]
    dtypes = list(given)
    for d in dtypes:
        if d not in support:
            raise UserError(f"dtype {d!r} is not probed; choose from {', '.join(sorted(support))}")
        if support[d] is not None:
            raise UserError(f"cannot probe {d} on {device}: {support[d]}")
    return dtypes


def _probe_matmul(device: str, dtype: str, size: int, config: ProbeConfig, catalog: DeviceSpec | None,
                  on_step: Callable[[str], None] | None) -> tuple[dict[str, Any], list[float]]:
    """One dtype's matmul: its row of the probe's ``matmul`` and its TFLOP/s samples (a CPU's side is reduced for
    slow dtypes unless the size was given)."""
    side, reduced_why = (size, None) if device != "cpu" or config.matmul_size else cpu_side_for(dtype, size)
    if on_step:
        on_step(f"matmul {dtype} {side}×{side}")
    restore = _tf32(dtype == "tf32") if device != "cpu" else (lambda: None)
    try:
        result = time_loop(_matmul_fn(dtype, side, device), config.loop, device=device)
    finally:
        restore()
    flops = 2 * side**3
    tflops = [flops / t / 1e12 for t in result.samples_s]
    stats = summarize(tflops)
    peak = catalog.peak(dtype) if catalog else None
    return {
        "tflops": stats.median,
        "stats": stats.to_dict(),
        "size": side,
        **({"reduced_from": size, "reduced_why": reduced_why} if reduced_why else {}),
        "catalog_peak_tflops": peak / 1e12 if peak else None,
        "fraction_of_peak": _fraction(stats.median * 1e12, peak),
        "warmup_iterations": result.warmup_iterations,
    }, tflops


class ProbeInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, turned into it) during a probe: ``matmul`` holds the dtypes measured before it, each row
    complete, ``copy_gbps`` the copy bandwidth if it was measured, ``unfinished`` the parts that were not. A probe is
    stored whole — the planner and the report read its bandwidth and kernel sections beside the matmul peaks — so
    these are printed, not stored; before, the command said only "interrupted" and the finished dtypes were gone
    (found in review)."""

    def __init__(self, hardware: str, matmul: dict[str, Any], unfinished: list[str], *,
                 copy_gbps: float | None = None) -> None:
        super().__init__()
        self.hardware, self.matmul, self.unfinished, self.copy_gbps = hardware, matmul, unfinished, copy_gbps


def probe(config: ProbeConfig | None = None, *, on_step: Callable[[str], None] | None = None) -> Measurement:
    """Measure matmul TFLOP/s per dtype and copy bandwidth on one device; return a Measurement."""
    import torch

    config = config or ProbeConfig()
    device = resolve_device(config.device)
    dtypes = _probed_dtypes(device, config.dtypes)
    catalog: DeviceSpec | None = None
    if device == "cpu":
        hardware = this_cpu()
    else:
        gpu_name = torch.cuda.get_device_properties(device).name
        catalog = match_device_name(gpu_name)
        hardware = catalog.name if catalog else gpu_name

    default_size, default_copy = default_sizes(device)
    size = config.matmul_size or default_size
    copy_bytes = config.copy_bytes or default_copy
    _check_memory(device, size, copy_bytes)
    matmul: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    bandwidth: dict[str, Any] = {}
    try:
        for dtype in dtypes:
            matmul[dtype], samples[f"matmul_{dtype}_tflops"] = _probe_matmul(device, dtype, size, config, catalog,
                                                                             on_step)
        if on_step:
            on_step(f"copy {copy_bytes >> 20} MiB")
        result, moved = _time_copy(device, copy_bytes, config.loop)
        gbps = [moved / t / 1e9 for t in result.samples_s]
        stats = summarize(gbps)
        catalog_bw = catalog.memory_bandwidth_bytes_per_s if catalog else None
        bandwidth = {
            "gbps": stats.median,
            "stats": stats.to_dict(),
            "bytes_per_iteration": moved,
            "catalog_gbps": catalog_bw / 1e9 if catalog_bw else None,
            "fraction_of_peak": _fraction(stats.median * 1e9, catalog_bw),
        }
        samples["copy_gbps"] = gbps
        # elementwise bandwidth and attention efficiency: the planner's other kernel classes
        kernels, kernel_samples = probe_kernels(device, config.loop, catalog=catalog, copy_gbps=stats.median,
                                                matmul=matmul, elementwise_bytes=copy_bytes, on_step=on_step)
    except KeyboardInterrupt:  # the interrupt may land in any part; what finished before it is said
        unfinished = [*(d for d in dtypes if d not in matmul), *([] if bandwidth else ["the copy"]),
                      "the kernel probes"]
        raise ProbeInterrupted(hardware, matmul, unfinished, copy_gbps=bandwidth.get("gbps")) from None
    samples.update(kernel_samples)

    details: dict[str, Any] = {
        "device": device,
        "catalog_name": catalog.name if catalog else None,
        "quick": config.short,
        "timer": result.timer,
        "matmul": matmul,
        "bandwidth": bandwidth,
        **kernels,
        "note": _note(catalog is not None, size, copy_bytes, default_size, default_copy, quick=config.quick,
                      min_time_s=config.min_time_s),
    }
    # each figure's quality (full / quick / small) with its size, so a peak is only ever taken from the best
    for dtype, row in matmul.items():
        row["quality"] = matmul_quality(details, dtype)
    bandwidth["quality"] = copy_quality(details)
    details["quality"] = probe_quality(details)
    return Measurement(
        kind="probe",
        name=f"hw probe {hardware}" + (" (quick)" if config.short else ""),
        hardware=hardware,
        throughput=max(m["tflops"] for m in matmul.values()) if matmul else None,
        throughput_unit="TFLOP/s (best matmul dtype)",
        details=details,
        environment=environment(with_torch=True),
        samples=samples,
    )
