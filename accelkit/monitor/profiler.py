"""`accelkit profile`: run a step under ``torch.profiler`` with a wait / warm-up / active schedule, write
the Chrome/Perfetto trace, and summarise it — top operators by self time (CPU and device), the temporal
breakdown and compute/communication overlap (``trace_analysis``), and peak memory."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelkit.core import UserError
from accelkit.core.spec import Spec, spec_field
from accelkit.monitor.trace_analysis import analyze_trace

#: ProfileConfig's default out_dir: a folder of runs, one sub-folder each (``_run_folder``)
DEFAULT_OUT_DIR = "accelkit-profile"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileConfig(Spec):
    """Profiler schedule and output."""

    wait: int = spec_field(1, min=0, max=10_000, doc="Steps run before the profiler starts recording.")
    warmup: int = spec_field(2, min=0, max=10_000, doc="Steps recorded then discarded (tracing warm-up).")
    steps: int = spec_field(5, min=1, max=10_000, doc="Steps profiled (the active window).")
    top: int = spec_field(15, min=1, max=10_000, doc="Operators listed per table.")
    out_dir: str = spec_field(
        DEFAULT_OUT_DIR,
        doc="Directory for trace.json and summary.json; the default puts each run in a folder of its own "
            "(accelkit-profile/<date>-<time>/).")
    record_shapes: bool = spec_field(False, doc="Record input shapes (bigger trace).")


# kineto writes a status line straight to file descriptor 2 at every profiler start and stop
# ("USDT:2026-12-02 01:31:11 23745:23745 SyncActivityProfilerHandler.cpp:52] profiler_start"; "STAGE:" lines
# with KINETO_LOG_LEVEL); its warnings and errors ("WARNING:", "ERROR:") are kept
_KINETO_CHATTER = re.compile(
    rb"^(USDT|STAGE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+\.cpp:\d+\] "
    # c10's CPU allocator, when a block made before the profiled window (weights, optimizer state, the last step's
    # gradients) is freed inside it: true of every training step, and nothing the user can act on
    rb"|^\[W\d{4} [\d:.]+ CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated before the "
    rb"profiling started")
_CHATTER_PREFIXES = (b"USDT:", b"STAGE:", b"[W")


@contextlib.contextmanager
def _without_kineto_chatter() -> Iterator[None]:
    """Pass everything written to file descriptor 2 through, except kineto's start/stop status lines and c10's
    CPU-allocator line about blocks allocated before profiling (``_KINETO_CHATTER``).

    Progress and warnings (Python's and C++'s) go on as they come: a partial line is forwarded at once unless it
    could still become a status line. Where fd 2 cannot be redirected (no such descriptor), nothing is done."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        pending = b""
        while chunk := os.read(read_end, 65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            out = b"".join(line + b"\n" for line in lines if not _KINETO_CHATTER.match(line))
            if pending and not any(p.startswith(pending[: len(p)]) for p in _CHATTER_PREFIXES):
                out, pending = out + pending, b""
            _write_all(saved, out)
        _write_all(saved, pending)

    pumping = threading.Thread(target=pump, name="accelkit-stderr", daemon=True)
    pumping.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # drops the pipe's last write end (unless a child process still holds it)
        pumping.join(timeout=5)
        if not pumping.is_alive():  # else a child still writes through it: leave both ends to the pump
            os.close(read_end)
            os.close(saved)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _is_device_side(event: Any) -> bool:
    """Whether ``event`` (a ``key_averages()`` row) is a device-side kernel/memcpy row.

    With kineto every kernel is its own row (device type CUDA, XPU …) AND the CPU op that launched it
    (``aten::mm``) reports the same time as its self device time: summing both counts the device time twice.
    Keep the device-side rows, as torch's own table does when it sums self device time
    (``profiler_util._build_table``); device-side user annotations (``record_function`` ranges mirrored on the
    device timeline) span kernels already counted, so they are left out as torch leaves them out.
    """
    from torch.profiler import DeviceType

    return event.device_type != DeviceType.CPU and not getattr(event, "is_user_annotation", False)


def _is_profiler_step(event: Any) -> bool:
    """Whether ``event`` is the profiler's own ``ProfilerStep#N`` range (``ProfilerStep*`` once averaged): an
    annotation spanning the whole step, not an operator — its self time is the Python between the step's ops."""
    return str(event.key).startswith(("ProfilerStep#", "ProfilerStep*"))


def _top_ops(averages: Any, key: str, top: int, steps: int) -> list[dict[str, Any]]:
    """The ``top`` rows of ``averages`` by ``key`` (device time: device-side rows only); shares are of their total.
    The ``ProfilerStep*`` annotation is no operator: it is left out of the rows and of the total (it topped the CPU
    table of a GPU run, whose CPU ops only launch kernels); ``_profiler_step`` reports it apart."""
    kept = [e for e in averages if (key != "self_device_time_total" or _is_device_side(e)) and not _is_profiler_step(e)]
    rows = sorted(kept, key=lambda e: getattr(e, key, 0.0), reverse=True)[:top]
    total = sum(getattr(e, key, 0.0) for e in kept) or 1.0
    return [
        {
            "name": e.key,
            "self_ms_per_step": getattr(e, key, 0.0) / 1e3 / steps,
            "share": getattr(e, key, 0.0) / total,
            "calls_per_step": e.count / steps,
        }
        for e in rows
        if getattr(e, key, 0.0) > 0
    ]


def _profiler_step(averages: Any, steps: int) -> dict[str, Any] | None:
    """The ``ProfilerStep*`` row(s), apart from the operators: their self CPU time per step is the host time between
    the step's operators (Python, framework dispatch) that the op table leaves out."""
    from torch.profiler import DeviceType

    rows = [e for e in averages if _is_profiler_step(e) and e.device_type == DeviceType.CPU]
    if not rows:
        return None
    return {"name": "ProfilerStep*",
            "self_cpu_ms_per_step": sum(e.self_cpu_time_total for e in rows) / 1e3 / steps,
            "cpu_ms_per_step": sum(e.cpu_time_total for e in rows) / 1e3 / steps,
            "note": "the profiler's step annotation: its self time is host time outside any operator (Python "
                    "between ops); not ranked with the operators"}


def _run_folder(out_dir: str) -> Path:
    """The folder this run writes into: ``out_dir`` as given, or under the default a new ``<date>-<time>`` folder.

    One shared default folder let each run overwrite the last one's trace.json, which stored results still named
    (found in review); a folder given with --out is the user's to reuse."""
    base = Path(out_dir)
    try:
        if out_dir != DEFAULT_OUT_DIR:
            base.mkdir(parents=True, exist_ok=True)
            return base
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for n in range(1, 1000):  # two runs in one second: -2, -3 …
            run = base / (stamp if n == 1 else f"{stamp}-{n}")
            try:
                run.mkdir(parents=True)
                return run
            except FileExistsError:
                continue
        raise FileExistsError(f"{base / stamp}-* all exist")
    except OSError as exc:
        raise UserError(f"the profile folder {base} cannot be created ({exc.strerror or exc}); give another (--out)") from exc


def profile_step(step: Callable[[], object], config: ProfileConfig | None = None, *, device: str = "cpu") -> dict[str, Any]:
    """Profile ``step`` and return the summary (also written to ``summary.json`` beside the trace)."""
    import torch
    from torch.profiler import ProfilerActivity

    config = config or ProfileConfig()
    out = _run_folder(config.out_dir)
    # absolute: a stored result names its trace from any working directory
    trace_path = (out / "trace.json").resolve()
    on_cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    total_steps = config.wait + config.warmup + config.steps
    t0 = time.perf_counter()
    try:
        prof = _run_profiled(step, config, activities, trace_path, total_steps, on_cuda)
    except KeyboardInterrupt:
        raise ProfileInterrupted(_left_behind(out, trace_path, remove=config.out_dir == DEFAULT_OUT_DIR)) from None
    wall_s = time.perf_counter() - t0
    _check_trace_written(trace_path)
    return _summarize(prof, config, trace_path, wall_s, rss_before, device)


def _check_trace_written(trace_path: Path) -> None:
    """torch writes the trace to ``trace.json.tmp`` and renames it, and says nothing when either fails (a folder
    that cannot be written, a ``trace.json`` that is a folder): the summary's read of the trace was then an internal
    error (IsADirectoryError, FileNotFoundError) and the ``.tmp`` file was left behind. One line naming the path and
    the fix instead, its leftover removed."""
    if trace_path.is_file():
        return
    leftover = trace_path.with_name(trace_path.name + ".tmp")
    with contextlib.suppress(OSError):
        leftover.unlink()
    why = "it is a folder" if trace_path.is_dir() else "the folder cannot be written"
    raise UserError(f"the profiler could not write its trace to {trace_path} ({why}); give another folder (--out)")


class ProfileInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM turned into it) while profiling: ``trace`` is the partial trace the profiler wrote on its
    way out (the steps recorded so far, no summary), or None — the run's own empty folder is removed. The command
    said only "interrupted" and left a trace of tens of MB nobody was told of, or an empty folder (found in
    review)."""

    def __init__(self, trace: Path | None) -> None:
        super().__init__()
        self.trace = trace


def _left_behind(out: Path, trace_path: Path, *, remove: bool) -> Path | None:
    """The partial trace an interrupted run left, if any; otherwise the run's own folder (``remove``: one made for
    this run under the default --out) is removed when empty."""
    if trace_path.is_file():
        return trace_path
    if remove:
        with contextlib.suppress(OSError):
            out.rmdir()  # (only when empty)
    return None


def _run_profiled(step: Callable[[], object], config: ProfileConfig, activities: list[Any], trace_path: Path,
                  total_steps: int, on_cuda: bool) -> Any:
    import torch
    from torch.profiler import profile, schedule

    with _without_kineto_chatter(), profile(
        activities=activities,
        schedule=schedule(wait=config.wait, warmup=config.warmup, active=config.steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path)),
        record_shapes=config.record_shapes,
        profile_memory=True,
    ) as prof:
        for _ in range(total_steps):
            step()
            if on_cuda:
                torch.cuda.synchronize()
            prof.step()
    return prof


def _summarize(prof: Any, config: ProfileConfig, trace_path: Path, wall_s: float, rss_before: int,
               device: str) -> dict[str, Any]:
    """The summary of a finished run, written to ``summary.json`` beside its trace."""
    import torch

    on_cuda = device.startswith("cuda")

    averages = prof.key_averages()
    trace = json.loads(trace_path.read_text())
    summary: dict[str, Any] = {
        "device": device,
        "schedule": {"wait": config.wait, "warmup": config.warmup, "active": config.steps},
        "wall_s": wall_s,
        "top_cpu_ops": _top_ops(averages, "self_cpu_time_total", config.top, config.steps),
        "top_device_ops": _top_ops(averages, "self_device_time_total", config.top, config.steps) if on_cuda else [],
        "profiler_step": _profiler_step(averages, config.steps),
        "breakdown": analyze_trace(trace),
        "peak_memory": (
            {"cuda_max_allocated_bytes": torch.cuda.max_memory_allocated(), "cuda_max_reserved_bytes": torch.cuda.max_memory_reserved()}
            if on_cuda
            else {"process_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "peak_rss_increase_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before,
                  "note": "CPU: peak resident set size of this process (ru_maxrss)"}
        ),
        "trace": str(trace_path),
        "python": sys.version.split()[0],
    }
    try:
        (trace_path.parent / "summary.json").write_text(json.dumps(summary, indent=2))
    except OSError as exc:  # a full disk, or a summary.json that is a folder: the user's to fix (an internal error)
        raise UserError(f"cannot write {trace_path.parent / 'summary.json'} ({exc.strerror or exc}); the trace is at "
                        f"{trace_path}; give another folder (--out)") from exc
    return summary
