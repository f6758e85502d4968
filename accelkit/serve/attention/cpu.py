"""The CPU backend: decodes read K/V in place from the paged cache in one compiled C loop per layer; prompt
chunks go through SDPA as in ``sdpa``.

Why our own kernel: on a CPU the ``sdpa`` backend copies every decode's context out of its blocks before SDPA
reads it again — the largest part of a batch-64 decode step on a 2-core Xeon; for one batch-64 layer on one
thread this kernel takes 2.8 ms against 6.3 ms for the gather into reused buffers + SDPA
(``benchmarks/cpu_hot_paths.py``). Reading each K/V row once from where it lies needs a kernel that
follows the block table; PyTorch has none for a CPU, and the maintained ones that do are tied to their engines
(vLLM's ``_C`` CPU ops) or to a torch version we cannot use (Intel's extension). So this is ~60 lines of C,
compiled on first use with the machine's C compiler (``cc``, ``-O3 -march=native``, OpenMP from the same
``libgomp`` torch loads) into ``~/.cache/accelkit/cpu_decode/`` under a name that hashes the source, the
compiler and this CPU's flags — or, where the home is read-only, ``<tmp>/accelkit-<uid>/``; a folder or file there
that another user could have written is never loaded from (the kernel is built for the process alone instead).
Where it cannot be built (no compiler) or cannot run (a quantized or non-float32 cache),
``attention_backend='auto'`` falls back to ``sdpa`` and says why once in the log.

One OpenMP work item per sequence: it walks the sequence's blocks, reads each cached K row (every KV head of it,
contiguous) once for all the query heads (GQA), keeps the scores, takes the softmax, then walks the V rows and sums
them weighted by it, asking for the next block's rows ahead of time (they lie elsewhere in the cache) — float32
throughout, the same math as SDPA up to the order of additions (the engine's token-identical tests against
transformers run on it). (A first version, one work item per sequence and KV head, had two threads reading
alternate halves of the same cache lines, and was slower on two threads.) ``benchmarks/cpu_hot_paths.py`` times
the kernel beside the ``sdpa`` path.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accelkit.serve.attention.base import StepTensors
from accelkit.serve.attention.sdpa import SdpaAttention, SdpaMetadata

log = logging.getLogger(__name__)

_SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* q: rows of (hq * d) floats, row i at q + i * q_stride; kc, vc: (num_blocks, bs, hkv, d) of one layer;
   tables: (n, table_stride) block ids; lens: (n,) context lengths including this step's token;
   out: (n, hq * d). Query head h reads KV head h / (hq / hkv). One work item per sequence, so that a cached
   row (all its KV heads: hkv * d contiguous floats) is read whole, by one thread, block after block. */
int accelkit_paged_decode_f32(const float *q, int64_t q_stride, const float *kc, const float *vc,
                              const int64_t *tables, int64_t table_stride, const int64_t *lens, int64_t n,
                              int64_t hq, int64_t hkv, int64_t d, int64_t bs, float scale, int64_t window,
                              float *out, int num_threads) {
    int64_t max_len = 0, failed = 0, row = hkv * d, rep = hq / hkv;
    for (int64_t i = 0; i < n; ++i) max_len = lens[i] > max_len ? lens[i] : max_len;
    #pragma omp parallel num_threads(num_threads) reduction(|: failed)
    {
        float *scores = (float *)malloc(sizeof(float) * (size_t)(hq * max_len + 2 * hq));
        if (!scores) failed = 1;
        #pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; ++i) {
            if (!scores) continue;
            int64_t len = lens[i];
            int64_t start = (window > 0 && len > window) ? len - window : 0, count = len - start;
            const float *qi = q + i * q_stride;
            const int64_t *table = tables + i * table_stride;
            float *mx = scores + hq * max_len, *inv = mx + hq;
            for (int64_t h = 0; h < hq; ++h) mx[h] = -INFINITY;
            for (int64_t t = start; t < len;) {
                int64_t off = t % bs, stop = t - off + bs < len ? t - off + bs : len;
                const float *k = kc + (table[t / bs] * bs + off) * row;
                if (stop < len) {  /* the next block lies elsewhere: ask for it while this one is worked on */
                    const char *next = (const char *)(kc + table[stop / bs] * bs * row);
                    for (int64_t b = 0; b < bs * row * 4; b += 64) __builtin_prefetch(next + b, 0, 1);
                }
                for (; t < stop; ++t, k += row) {
                    for (int64_t h = 0; h < hq; ++h) {
                        const float *qh = qi + h * d, *kh = k + (h / rep) * d;
                        float dot = 0.0f;
                        for (int64_t x = 0; x < d; ++x) dot += qh[x] * kh[x];
                        dot *= scale;
                        scores[h * max_len + (t - start)] = dot;
                        if (dot > mx[h]) mx[h] = dot;
                    }
                }
            }
            for (int64_t h = 0; h < hq; ++h) {
                float sum = 0.0f, *s = scores + h * max_len, m = mx[h];
                for (int64_t t = 0; t < count; ++t) { s[t] = expf(s[t] - m); sum += s[t]; }
                inv[h] = 1.0f / sum;
            }
            float *o = out + i * hq * d;
            memset(o, 0, sizeof(float) * (size_t)(hq * d));
            for (int64_t t = start; t < len;) {
                int64_t off = t % bs, stop = t - off + bs < len ? t - off + bs : len;
                const float *v = vc + (table[t / bs] * bs + off) * row;
                if (stop < len) {
                    const char *next = (const char *)(vc + table[stop / bs] * bs * row);
                    for (int64_t b = 0; b < bs * row * 4; b += 64) __builtin_prefetch(next + b, 0, 1);
                }
                for (; t < stop; ++t, v += row) {
                    for (int64_t h = 0; h < hq; ++h) {
                        float p = scores[h * max_len + (t - start)] * inv[h], *oh = o + h * d;
                        const float *vh = v + (h / rep) * d;
                        for (int64_t x = 0; x < d; ++x) oh[x] += p * vh[x];
                    }
                }
            }
        }
        free(scores);
    }
    return failed ? -1 : 0;
}
"""
_FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math",
          "-fassociative-math", "-fno-signed-zeros"]  # reassociation lets the dot products vectorize; infinities kept
if platform.machine().lower() in ("x86_64", "amd64"):
    _FLAGS.append("-mprefer-vector-width=512")  # 512-bit vectors where the CPU has them (ignored where it has not)
_kernel: Any = None
_kernel_problem: str | None = None


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor()


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "accelkit" / "cpu_decode"


def _unsafe(path: Path, *, folder: bool) -> str | None:
    """Why loading a kernel from ``path`` (a folder, or the kernel file in one) could run another user's code (None
    when it cannot): it must be this user's own, no symlink, and writable by no one else. (found in review: the
    shared-temp fallback was made with exist_ok and its file loaded unchecked, so another local user could plant
    the kernel there, under a name anyone can compute, and have it run as the server's user.)"""
    st = os.lstat(path)
    if not (stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)):
        return f"is not a {'folder' if folder else 'regular file'} (a symlink?)"
    uid = os.getuid() if hasattr(os, "getuid") else None
    if uid is not None and st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not this user (uid {uid})"
    if st.st_mode & 0o022:
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o}); `chmod go-w` it"
    return None


def _kernel_dir() -> tuple[Path, bool]:
    """Where the kernel is cached, and whether that folder is this process's own (to remove once it is loaded): the
    user's cache, else (a read-only home) ``<tmp>/accelkit-<uid>``, each only if this user alone can write it; else
    a new private folder — the kernel is built again (a second or so), never loaded from where others can write."""
    user = os.getuid() if hasattr(os, "getuid") else "user"
    refused = []
    for folder in (_cache_dir(), Path(tempfile.gettempdir()) / f"accelkit-{user}"):
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            problem = _unsafe(folder, folder=True)
        except OSError:  # (a read-only home: the next one)
            continue
        if problem is None:
            return folder, False
        refused.append(f"{folder} {problem}")
    if refused:
        log.warning("not caching the CPU decode kernel where another user could replace it (%s); building it for "
                    "this process alone", "; ".join(refused))
    return Path(tempfile.mkdtemp(prefix="accelkit-cpu-decode-")), True


def _compile(command: list[str], target: Path) -> None:
    compiler, started = command[0], time.perf_counter()
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src, out = Path(tmp) / "paged_decode.c", Path(tmp) / "paged_decode.so"
        src.write_text(_SOURCE)
        done = subprocess.run([*command, *_FLAGS, "-o", str(out), str(src), "-lm"], capture_output=True,
                              text=True, timeout=120)
        if done.returncode != 0:
            last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{compiler} could not build the CPU decode kernel ({last})")
        os.chmod(out, 0o755)  # writable by this user alone whatever the umask (a group-writable one is not loaded)
        os.replace(out, target)  # atomic: a process building beside this one reads a whole file or none
    log.info("built the CPU decode kernel with %s in %.1f s: %s", compiler, time.perf_counter() - started, target)


def kernel_file_name(command: list[str]) -> str:
    """The kernel's file name for the compiler ``command``: a hash of the source, the flags, the compiler's version
    and this CPU's flags (a home shared with a different CPU or compiler gets its own build)."""
    version = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256("\0".join([_SOURCE, *_FLAGS, version, _cpu_flags()]).encode()).hexdigest()[:16]
    return f"paged_decode_{key}.so"


def _build() -> Any:
    found = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if found is None:
        raise RuntimeError("no C compiler (cc or gcc) on PATH; install one (Debian: apt install gcc) or set CC")
    command = shlex.split(found)  # (CC may carry flags of its own)
    compiler = command[0]
    try:
        name = kernel_file_name(command)
    except OSError as exc:
        raise RuntimeError(f"the C compiler {compiler!r} does not run ({exc.strerror}); install one (Debian: apt "
                           "install gcc) or point CC at it") from exc
    folder, private = _kernel_dir()
    target = folder / name
    built = os.path.lexists(target)
    problem = _unsafe(target, folder=False) if built else None
    if problem is not None:  # (in a folder only this user writes: replaced by a build of its own)
        log.warning("not loading the CPU decode kernel %s: it %s; building it again", target, problem)
    try:
        if not built or problem is not None:
            _compile(command, target)
        lib = ctypes.CDLL(str(target))
    finally:
        if private:  # (the loaded library stays mapped)
            shutil.rmtree(folder, ignore_errors=True)
    fn = lib.accelkit_paged_decode_f32
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    fn.argtypes = [p, i64, p, p, p, i64, p, i64, i64, i64, i64, i64, ctypes.c_float, i64, p, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def decode_kernel() -> tuple[Any, str | None]:
    """The compiled kernel (built on first call), or None and why it is not there."""
    global _kernel, _kernel_problem
    if _kernel is None and _kernel_problem is None:
        try:
            _kernel = _build()
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            _kernel_problem = str(exc)
    return _kernel, _kernel_problem


def unsupported(cache: Any) -> str | None:
    """Why the kernel cannot read ``cache`` (None when it can)."""
    if cache.kind != "auto" or cache.dtype != torch.float32 or cache.k.device.type != "cpu":
        return (f"the CPU decode kernel reads float32 caches on a CPU (this one: kv_cache_dtype={cache.kind!r}, "
                f"{cache.dtype}, {cache.k.device.type})")
    return decode_kernel()[1]


@dataclass(slots=True)
class CpuMetadata(SdpaMetadata):
    num_decodes: int = 0
    block_tables: np.ndarray | None = None  # (S, W) int64, the step's host table (rows of the decodes first)
    seq_lens: np.ndarray | None = None  # (S,) int64


class CpuPagedAttention(SdpaAttention):
    name = "cpu"
    sorts_decodes = False  # one call per layer, work handed out dynamically: no grouping by length to do

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        problem = unsupported(self.cache)
        if problem:
            raise ValueError(f"attention_backend='cpu': {problem}; use attention_backend='sdpa' or 'auto'")
        self._kernel = decode_kernel()[0]
        self._window = self.sliding_window or 0

    def prepare(self, step: StepTensors) -> CpuMetadata:
        meta = CpuMetadata(slot_mapping=step.slot_mapping, num_decodes=step.num_decodes,
                           block_tables=step.block_tables_np, seq_lens=step.seq_lens_np)
        self._plan_prefills(step, meta)
        return meta

    def _decodes(self, q: torch.Tensor, layer: int, meta: SdpaMetadata) -> list[torch.Tensor]:
        assert isinstance(meta, CpuMetadata) and meta.block_tables is not None and meta.seq_lens is not None
        n = meta.num_decodes
        if n == 0:
            return []
        _, num_heads, head_dim = q.shape
        if q.stride(2) != 1 or q.stride(1) != head_dim:
            q = q.contiguous()
        tables, lens = meta.block_tables, meta.seq_lens
        assert tables.dtype == np.int64 and lens.dtype == np.int64 and tables.strides[1] == 8
        out = torch.empty(n, num_heads * head_dim, dtype=torch.float32)
        cache = self.cache
        # One work item per sequence: a team larger than the batch only adds threads to wake and, on a busy machine,
        # a barrier that waits for one taken off its core (benchmarks/cpu_decode_team.py measures it).
        failed = self._kernel(
            q.data_ptr(), q.stride(0), cache.k[layer].data_ptr(), cache.v[layer].data_ptr(), tables.ctypes.data,
            tables.strides[0] // 8, lens.ctypes.data, n, num_heads, cache.num_kv_heads, head_dim, cache.block_size,
            self.scale, self._window, out.data_ptr(), min(n, torch.get_num_threads()),
        )
        if failed:
            raise MemoryError("the CPU decode kernel could not allocate its scores buffer")
        return [out]
