"""`dataloader`: input-pipeline throughput of a dataset across DataLoader settings, and whether a training
step of a given length would wait for its input.

Each setting is one variant. They run one after another, not interleaved: an idle loader's workers keep
prefetching while another is timed, which would flatter whichever runs second.
"""

from __future__ import annotations

import itertools
import os
import warnings
from dataclasses import dataclass
from typing import Any

from accelkit.bench.variants import Variant
from accelkit.bench.workloads.base import MAX_SIZE, BenchWorkload, Prepared, Step, free_bytes, gb
from accelkit.bench.workloads.custom import load_factory
from accelkit.core import UserError
from accelkit.core.spec import Spec, spec_field


@dataclass(frozen=True, slots=True, kw_only=True)
class DataLoaderConfig(Spec):
    """torch DataLoader throughput over a grid of settings."""

    dataset: str | None = spec_field(
        None, doc="'package.module:factory' returning a map-style torch Dataset; None = synthetic images."
    )
    batch_size: int = spec_field(64, min=1, max=MAX_SIZE, doc="Samples per batch.")
    num_workers: tuple[int, ...] = spec_field((0, 2), doc="Worker process counts to try.")
    pin_memory: tuple[bool, ...] = spec_field((False,), doc="pin_memory settings to try (pinning helps GPU copies).")
    prefetch_factor: tuple[int, ...] = spec_field((2,), doc="Batches prefetched per worker (with workers > 0).")
    step_time_s: float | None = spec_field(
        None, min=0.0, max=86_400.0,
        doc="Seconds one training step takes at this batch size (at most a day); says whether it would be input-bound."
    )
    image_size: int = spec_field(224, min=8, max=MAX_SIZE, doc="Side of the synthetic images.")

    def validate(self) -> None:
        for name in ("num_workers", "prefetch_factor", "pin_memory"):
            if not getattr(self, name):
                raise ValueError(f"{name} needs at least one value")
        # the value and the flag, as every other out-of-range flag is refused ("num_workers must be >= 0 and
        # prefetch_factor >= 1" named neither the value given nor which of the two it was)
        if bad := [w for w in self.num_workers if w < 0]:
            raise ValueError(f"--num-workers {bad[0]} is out of range; the least is 0 (0: load in the training process)")
        if bad := [p for p in self.prefetch_factor if p < 1]:
            raise ValueError(f"--prefetch-factor {bad[0]} is out of range; the least is 1 (batches per worker)")
        if self.step_time_s == 0:  # (every setting came out input-bound against a step of 0.0 ms)
            raise ValueError("--step-time 0 is no training step; give the seconds one step takes at this batch size "
                             "(more than 0), or leave it out")


#: worker processes per usable core above which a setting is refused (torch's DataLoader warns above one per core)
MAX_WORKERS_PER_CORE = 4


def _nbytes(sample: Any) -> int:
    """Bytes of the tensors in one sample (a tensor, or tuples / lists / dicts of them); other values count 0."""
    if hasattr(sample, "element_size") and hasattr(sample, "nelement"):
        return int(sample.element_size() * sample.nelement())
    if isinstance(sample, dict):
        return sum(_nbytes(v) for v in sample.values())
    if isinstance(sample, (tuple, list)):
        return sum(_nbytes(v) for v in sample)
    return 0


class SyntheticImages:
    """Decoded-JPEG-sized uint8 images → float, random crop + flip, normalised: the CPU work of a typical
    ImageNet pipeline without files. Deterministic per index; picklable for worker processes."""

    def __init__(self, size: int, length: int = 1 << 20):
        self.size, self.length = size, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import torch

        gen = torch.Generator().manual_seed(index)
        big = self.size + self.size // 7  # e.g. 256 → crop 224
        raw = torch.randint(0, 256, (3, big, big), dtype=torch.uint8, generator=gen)
        top, left = (int(v) for v in torch.randint(0, big - self.size + 1, (2,), generator=gen))
        img = raw[:, top : top + self.size, left : left + self.size].float().div_(255)
        if index % 2:
            img = img.flip(-1)
        mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
        return (img - mean) / std, index % 1000


class DataLoaderBench(BenchWorkload):
    name = "dataloader"
    config_cls = DataLoaderConfig
    task = "input"
    summary = "input-pipeline throughput across num_workers / pin_memory / prefetch_factor"
    can_interleave = False

    @property
    def label(self) -> str:
        source = self.config.dataset or f"synthetic {self.config.image_size}px images"
        return f"dataloader {source} b{self.config.batch_size}"

    def variants(self, requested: list[Variant]) -> list[Variant]:
        c = self.config
        out: dict[str, Variant] = {}
        for workers, pin, prefetch in itertools.product(c.num_workers, c.pin_memory, c.prefetch_factor):
            settings = {"num_workers": workers, "pin_memory": pin, "prefetch_factor": prefetch if workers else None}
            label = f"workers={workers} pin={'on' if pin else 'off'}" + (f" prefetch={prefetch}" if workers else "")
            out.setdefault(label, Variant(label=label, settings=settings))
        return list(out.values())

    def refusal(self, variant: Variant, device: str) -> str | None:
        if variant.settings.get("pin_memory") and not device.startswith("cuda"):
            return "pin_memory pins host memory for faster copies to a GPU; there is no GPU here"
        return None

    def check(self, device: str) -> None:
        """Refuse up front what would only thrash: more worker processes than the cores can run, or batches in
        flight (the one being read, plus prefetch_factor per worker) that do not fit in RAM — before any is made."""
        c = self.config
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        most = MAX_WORKERS_PER_CORE * cores
        if max(c.num_workers) > most:
            raise UserError(f"--num-workers {max(c.num_workers)} is more than {MAX_WORKERS_PER_CORE} worker processes "
                            f"per usable CPU core ({cores} here, so at most {most}); more only measures contention — "
                            "give fewer")
        if c.dataset is None:
            sample, what = 3 * c.image_size**2 * 4, f"3×{c.image_size}×{c.image_size} float32 images"
        else:
            try:
                first = self.dataset()[0]
            except UserError:
                raise
            except Exception as exc:  # the user's code: one line naming the target and what it must return
                raise UserError(f"--dataset {c.dataset!r}: reading its first sample raised {type(exc).__name__}: {exc}; "
                                "the factory takes no arguments and returns a map-style torch Dataset") from exc
            sample, what = _nbytes(first), f"samples of {c.dataset}"
        in_flight = 1 + max((w * p for w in c.num_workers for p in c.prefetch_factor), default=0)
        needed = c.batch_size * sample * in_flight
        free, where = free_bytes("cpu")
        if needed * 6 > free * 5:  # 20% headroom; integers, since a fuzzed size can exceed a float
            fix = ", ".join(["--batch-size", *(["--image-size"] if c.dataset is None else []), "--num-workers"])
            raise UserError(
                f"--batch-size {c.batch_size} of {what} is {gb(c.batch_size * sample)} a batch, and the {in_flight} "
                f"batch(es) in flight (the one read, plus --num-workers × --prefetch-factor) need {gb(needed)}; {where}; "
                f"lower {fix} or --prefetch-factor")

    def dataset(self) -> Any:
        if self.config.dataset is None:
            return SyntheticImages(self.config.image_size)
        return load_factory(self.config.dataset, what="--dataset")()

    def prepare(self, variant: Variant, device: str, *, seed: int) -> Prepared:
        import torch
        from torch.utils.data import DataLoader, RandomSampler

        dataset = self.dataset()
        # sampling with replacement never runs out, so no iterator restarts (worker spawns) are timed
        sampler = RandomSampler(dataset, replacement=True, num_samples=1 << 40,
                                generator=torch.Generator().manual_seed(seed))
        s = variant.settings
        with warnings.catch_warnings():  # torch's "excessive worker creation" warning, said below in our words
            warnings.filterwarnings("ignore", message=r"This DataLoader will create \d+ worker processes",
                                    category=UserWarning)
            loader = DataLoader(
                dataset, batch_size=self.config.batch_size, sampler=sampler, num_workers=s["num_workers"],
                pin_memory=s["pin_memory"], prefetch_factor=s["prefetch_factor"],
                persistent_workers=s["num_workers"] > 0,
            )
            iterator = iter(loader)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        notes = [f"{s['num_workers']} worker processes on {cores} usable CPU core(s): more workers than cores "
                 "contend for them (a comparison point, not a setting to train with)"] if s["num_workers"] > cores else []

        def next_batch() -> object:
            return next(iterator)

        def close() -> None:
            nonlocal iterator
            shutdown = getattr(iterator, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            del iterator

        return Prepared(steps=[Step("next batch", next_batch, self.config.batch_size, "samples",
                                    latency_name="batch latency")], close=close, notes=notes)

    def input_bound(self, batch_time_s: float, variant: Variant | None = None) -> dict[str, Any] | None:
        """Compare the loader's wall time per batch (measured seconds ÷ batches) with the given training-step time.
        With ``variant``'s num_workers 0 the batch is loaded in the training process, between steps: nothing
        overlaps it, so however short it is it adds its time to every step — said as such, with no headroom.
        ``variant`` None: its settings are not known, and loading is taken to overlap the step."""
        step = self.config.step_time_s
        if step is None:
            return None
        if variant is not None and variant.settings.get("num_workers") == 0:
            share = batch_time_s / (step + batch_time_s) if step + batch_time_s > 0 else 0.0
            return {
                "step_time_s": step,
                "batch_time_s": batch_time_s,
                "headroom": None,  # no overlap to have headroom in
                "verdict": f"synchronous (num_workers=0): loading adds {batch_time_s * 1e3:.3g} ms to every step "
                           f"({share:.0%} of step + load); workers would overlap it with the step",
            }
        bound = batch_time_s > step
        return {
            "step_time_s": step,
            "batch_time_s": batch_time_s,
            "headroom": step / batch_time_s if batch_time_s > 0 else None,
            "verdict": "input-bound: the step would wait for data" if bound else "not input-bound",
        }
