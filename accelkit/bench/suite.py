"""Named suites: ``quick`` (tiny models, about a minute on two CPU cores — what `make demo` runs) and
``reference`` (BERT-large inference, ResNet-50 training, Llama-3.1-8B-shaped decode, SDXL text-to-image at
MLPerf's settings: the workloads of the published comparison tables, printed next to ours on a catalog
accelerator)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accelkit.bench.runner import BenchConfig, Reporter, run_benchmark
from accelkit.bench.variants import Variant, device_refusal, matrix
from accelkit.bench.workloads import make_workload
from accelkit.core import UnknownNameError, UserError
from accelkit.core.bench_result import BenchRunResult
from accelkit.hardware.device import resolve_device
from accelkit.timing import LoopConfig


@dataclass(frozen=True, slots=True)
class SuiteItem:
    """One workload of a suite: its config and the precisions per device type."""

    key: str
    workload: str
    config: dict[str, Any]
    cpu_precisions: tuple[str, ...] = ("fp32", "bf16")
    gpu_precisions: tuple[str, ...] = ("bf16", "fp16", "fp8")
    gpu_config: dict[str, Any] = field(default_factory=dict)  # overrides on a GPU (bigger batches)


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    summary: str
    items: tuple[SuiteItem, ...]
    loop: LoopConfig
    #: how long it took where it was measured (printed when it starts, so a log says what to expect); None: unmeasured
    duration: str | None = None


def quick() -> Suite:
    """Tiny sizes of every workload; short loops (percentiles above p50 are flagged as not backed)."""
    return Suite(
        "quick", "tiny sizes of every workload, short loops (about a minute on 2 CPU cores)",
        (
            SuiteItem("bert-tiny", "bert", {"size": "tiny", "batch_size": 8, "seq_len": 128}),
            SuiteItem("resnet-tiny-train", "resnet", {"size": "tiny", "batch_size": 16}),
            SuiteItem("llm-tiny", "llm", {"model": "tiny-llama", "prompt_len": 64, "output_len": 32}),
            SuiteItem("llm-train-tiny", "llm-train", {"model": "tiny-llama", "batch_size": 2, "seq_len": 128}),
            SuiteItem("dataloader-synthetic", "dataloader", {"image_size": 64, "batch_size": 32, "num_workers": [0, 2]},
                      cpu_precisions=(), gpu_precisions=()),
            SuiteItem("diffusion-tiny", "diffusion", {"size": "tiny", "arch": "sd3", "height": 64, "width": 64,
                                                      "steps": 2}),
        ),
        LoopConfig(warmup_iterations=5, warmup_time_s=0.3, min_iterations=10, min_time_s=1.5),
        duration="44 s on a 2-core CPU (docs/methodology.md)",
    )


def reference() -> Suite:
    """The published comparison workloads, with the methodology's default loops."""
    return Suite(
        "reference", "BERT-large inference (s384), ResNet-50 training, Llama-3.1-8B-shaped decode, SDXL text-to-image",
        (
            SuiteItem("bert-large-infer", "bert", {"size": "large", "batch_size": 8, "seq_len": 384},
                      gpu_config={"batch_size": 64}),
            SuiteItem("resnet50-train", "resnet", {"size": "50", "batch_size": 32},
                      gpu_precisions=("tf32", "bf16", "fp16"), gpu_config={"batch_size": 256}),
            SuiteItem("llama3-8b-decode", "llm", {"model": "llama-3.1-8b", "prompt_len": 128, "output_len": 64},
                      gpu_precisions=("bf16", "fp8"), gpu_config={"batch_size": 16}),
            # MLPerf Inference's text-to-image: SDXL base, 1024², 20 Euler steps, guidance 8 (on a GPU); a CPU runs
            # the same pipeline at 512² and 2 steps (1024² × 20 steps is hours per image on a CPU)
            SuiteItem("sdxl-text-to-image", "diffusion",
                      {"arch": "sdxl", "size": "full", "guidance": 8.0, "height": 512, "width": 512, "steps": 2},
                      cpu_precisions=("bf16",), gpu_precisions=("bf16", "fp16", "fp8"),
                      gpu_config={"height": 1024, "width": 1024, "steps": 20, "batch_size": 8}),
        ),
        LoopConfig(),
        duration="--quick took about 14 min on a 2-core CPU (docs/bench.md)",
    )


SUITES: dict[str, Callable[[], Suite]] = {"quick": quick, "reference": reference}

#: published per-device throughput (docs/methodology.md, "Published figures"): (suite item, catalog device) → figures
PUBLISHED: dict[tuple[str, str], list[dict[str, str | float]]] = {
    ("resnet50-train", "A100-SXM4-80GB"): [
        {"value": 938, "unit": "images/s", "what": "TF32", "source": "NVIDIA DeepLearningExamples, PyTorch ResNet50 README"},
        {"value": 2470, "unit": "images/s", "what": "AMP", "source": "NVIDIA DeepLearningExamples, PyTorch ResNet50 README"},
    ],
    ("resnet50-train", "H100-SXM5-80GB"): [
        {"value": 7160, "unit": "images/s", "what": "per GPU of an 8-GPU system", "source": "MLPerf Training v4.0"}],
    ("resnet50-train", "H200-SXM-141GB"): [
        {"value": 7950, "unit": "images/s", "what": "per GPU of an 8-GPU system", "source": "MLPerf Training v4.0"}],
    ("bert-large-infer", "A100-SXM4-80GB"): [
        {"value": 3590, "unit": "samples/s", "what": "BERT-99 Offline", "source": "MLPerf Inference v3.0"}],
    ("bert-large-infer", "H100-SXM5-80GB"): [
        {"value": 9369, "unit": "samples/s", "what": "BERT-99 Offline", "source": "MLPerf Inference v3.0"}],
    ("llama3-8b-decode", "H100-SXM5-80GB"): [
        {"value": 3066, "unit": "tokens/s", "what": "Llama2-70B Offline — a larger model: scale, not a target",
         "source": "MLPerf Inference v4.1"}],
    ("llama3-8b-decode", "H200-SXM-141GB"): [
        {"value": 3913, "unit": "tokens/s", "what": "Llama2-70B Offline — a larger model: scale, not a target",
         "source": "MLPerf Inference v4.1"}],
    ("llama3-8b-decode", "MI300X"): [
        {"value": 2939, "unit": "tokens/s", "what": "Llama2-70B Offline — a larger model: scale, not a target",
         "source": "MLPerf Inference v4.1"}],
    # stable-diffusion-xl Offline, closed division, NVIDIA TensorRT (mlcommons/inference_results_v4.0 and _v4.1,
    # closed/NVIDIA/results/<system>/stable-diffusion-xl/Offline/performance/run_1/mlperf_log_summary.txt)
    ("sdxl-text-to-image", "H100-SXM5-80GB"): [
        {"value": 1.64, "unit": "images/s", "what": "SDXL Offline, one H100 (DGX-H100_H100-SXM-80GBx1_TRT: 1.64178 "
                                                    "samples/s)", "source": "MLPerf Inference v4.0 (NVIDIA, closed)"},
        {"value": 2.04, "unit": "images/s", "what": "SDXL Offline, per GPU of 8 (DGX-H100_H100-SXM-80GBx8_TRT: "
                                                    "16.3484 samples/s)", "source": "MLPerf Inference v4.1 (NVIDIA, closed)"}],
    ("sdxl-text-to-image", "H200-SXM-141GB"): [
        {"value": 2.18, "unit": "images/s", "what": "SDXL Offline, per GPU of 8 (H200-SXM-141GBx8_TRT: 17.4186 "
                                                    "samples/s)", "source": "MLPerf Inference v4.1 (NVIDIA, closed)"}],
}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise UnknownNameError("suite", name, SUITES)
    return SUITES[name]()


@dataclass
class SuiteRun:
    suite: str
    run_id: str
    runs: list[BenchRunResult] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)  # a workload that raised outside its variants
    published: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    stopped_by: str | None = None  # SIGINT or SIGTERM, when one stopped it
    #: the suite item of each run (parallel to ``runs``), and the items an interruption left without a run
    keys: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    store_error: str | None = None  # the store refused a write: the runs from then on are kept here, not stored

    @property
    def result_ids(self) -> list[int]:
        return [i for r in self.runs for i in r.result_ids]

    @property
    def any_failed(self) -> bool:
        return bool(self.failed) or any(r.failed for r in self.runs)

    def unfinished_text(self) -> str:
        """What an interruption left undone, per suite item: ``resnet-tiny-train (fp32, bf16); not run: llm-tiny,
        …`` — it said ``not finished: fp32, bf16``, naming neither the workload nor the ones that never ran."""
        parts = [f"{key} ({', '.join(run.unfinished)})" for key, run in zip(self.keys, self.runs, strict=True)
                 if run.unfinished]
        if self.not_run:
            parts.append(f"not run: {', '.join(self.not_run)}")
        return "; ".join(parts) or "none"

    def to_json(self) -> dict[str, Any]:
        runs = [r.to_json() for r in self.runs]
        environment = runs[0].pop("environment") if runs else {}
        for r in runs[1:]:
            r.pop("environment")
        return {"suite": self.suite, "run_id": self.run_id, "interrupted": self.interrupted, "runs": runs,
                "skipped": self.skipped, "failed": self.failed, "published": self.published,
                "environment": environment, "result_ids": self.result_ids, "not_run": self.not_run,
                **({"store_error": self.store_error} if self.store_error is not None else {}),
                **({"stopped_by": self.stopped_by} if self.stopped_by is not None else {})}


def check_precisions(precisions: list[str], device: str) -> None:
    """Refuse up front (exit 2) when none of ``precisions`` can run on ``device`` — before any model is built."""
    reasons = {}
    for p in precisions:
        variant = Variant.from_dict({"precision": p})
        infer, train = device_refusal(variant, device), device_refusal(variant, device, training=True)
        if infer and train:
            reasons[p] = infer
    if len(reasons) == len(precisions):
        raise UserError("nothing to run: " + "; ".join(f"--precision {p}: {r}" for p, r in reasons.items()))


class _ItemReporter(Reporter):
    """``reporter`` for one suite item: a refusal or failure names the workload it is about (``refused int8 in
    resnet-tiny-train: …``) — in a suite, ``refused fp8: …`` came once per workload with nothing saying whose, and
    with ``--no-progress`` those lines are all stderr has. Everything else is passed on as it is."""

    def __init__(self, inner: Reporter, key: str) -> None:
        self.inner, self.key = inner, key

    def refused(self, variant: str, reason: str) -> None:
        self.inner.refused(f"{variant} in {self.key}", reason)

    def failed(self, variant: str, phase: str, error: str) -> None:
        self.inner.failed(f"{variant} in {self.key}", phase, error)

    def status(self, text: str) -> None:
        self.inner.status(text)

    def phase(self, lane: str, text: str) -> None:
        self.inner.phase(lane, text)

    def progress(self, lane: str, iterations: int, measured_s: float, config: LoopConfig) -> None:
        self.inner.progress(lane, iterations, measured_s, config)

    def note(self, text: str) -> None:
        self.inner.note(text)

    def stored(self, variant: str, result_ids: list[int]) -> None:
        self.inner.stored(f"{variant} in {self.key}", result_ids)


def run_suite(
    name: str,
    config: BenchConfig | None = None,
    *,
    loop: LoopConfig | None = None,
    store: Any = None,
    reporter: Reporter | None = None,
    precisions: list[str] | None = None,
) -> SuiteRun:
    """Run every workload of suite ``name``; one that cannot run here is skipped with its reason, one that fails
    is recorded with its error and the suite goes on. ``precisions`` replaces the suite's own per device. When
    the store refuses a write, the suite goes on without storing and ``store_error`` says why.

    The loop is ``loop`` when given, else ``config.loop`` when it is not the default ``LoopConfig()``, else the
    suite's own (``run_suite("quick", BenchConfig(loop=LoopConfig(min_time_s=5)))`` ran the suite's 1.5 s)."""
    suite = get_suite(name)
    if loop is None:
        loop = config.loop if config is not None and config.loop != LoopConfig() else suite.loop
    config = (config or BenchConfig()).replace(loop=loop)
    device = resolve_device(config.device)
    config = config.replace(device=device)
    if precisions:
        check_precisions(precisions, device)
    on_gpu = device.startswith("cuda")
    out = SuiteRun(suite=suite.name, run_id=uuid.uuid4().hex[:12])
    reporter = reporter or Reporter()
    for index, item in enumerate(suite.items):
        own = item.gpu_precisions if on_gpu else item.cpu_precisions
        variants = matrix((precisions or own or ("fp32",)) if own else ("fp32",))
        try:
            reporter.note(f"suite {suite.name}: {item.key} — building {item.workload}")
            workload = make_workload(item.workload, {**item.config, **(item.gpu_config if on_gpu else {})})
            reporter.note(f"suite {suite.name}: {item.key} ({workload.label})")
            run = run_benchmark(workload, variants, config, store=store, reporter=_ItemReporter(reporter, item.key),
                                run_id=out.run_id)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM between measurements (building a model): the runs so far stand
            out.interrupted, out.stopped_by = True, out.stopped_by or "SIGINT"
            out.not_run = [i.key for i in suite.items[index:]]
            break
        except UserError as exc:
            out.skipped.append({"key": item.key, "reason": str(exc)})
            reporter.note(f"skipped {item.key}: {exc}")
            continue
        except Exception as exc:  # one workload's failure must not lose the others' results
            error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            out.failed.append({"key": item.key, "error": error})
            reporter.failed(item.key, "setup", error)
            continue
        out.runs.append(run)
        out.keys.append(item.key)
        if run.store_error is not None and out.store_error is None:
            # measure the rest without storing: each write would wait out the lock timeout and fail again
            out.store_error = run.store_error
            config = config.replace(save=False)
        out.published.extend(published_next_to(item.key, run))
        if run.interrupted:
            out.interrupted, out.stopped_by = True, run.stopped_by
            out.not_run = [i.key for i in suite.items[index + 1:]]
            break
    return out


def published_next_to(key: str, run: BenchRunResult) -> list[dict[str, Any]]:
    """The published per-device figures for this suite item on this hardware, with our best variant beside."""
    out = []
    for figure in PUBLISHED.get((key, run.hardware), []):
        headline = [v for v in run.variants if v.step == "decode"] or run.variants  # decode tokens/s for LLMs
        best = max(headline, key=lambda v: v.throughput.value or 0.0, default=None)
        out.append({
            "key": key, "hardware": run.hardware, **figure,
            "ours_best": best.throughput.value if best else None,
            "ours_variant": best.name if best else None,
            "ours_unit": best.throughput.unit if best else None,
        })
    return out
