"""`accelkit sweep sweep.yaml`: a grid of ordinary bench / plan / loadtest runs, every result in the store
under the sweep's run id.

    load (YAML → SweepSpec; errors name the field) → expand (product of the axes) → run each point
    (local process pool, or Ray tasks with ``ray``) → collect (store; a failed point is a 'sweep-error'
    row with its error) → summary (one 'sweep' row listing every point)

A point runs in a worker process (pool or Ray) exactly as the command would: ``run_benchmark`` (or the
torchrun launcher when its layout has ``nproc_per_node``), ``plan`` or ``run_loadtest``, writing to that
machine's results store. When the point ran against another store (another Ray node), the driver copies
its rows into its own. A point never raises: its error comes back as data, and the sweep goes on.

A store that refuses a write (locked, read-only, full) ends no point either, as in ``accelkit bench``: a point
whose results it did not take hands them back whole (its line's ``unstored``), the driver writes nothing more to
that store and hands out the points still to run with saving off, and ``SweepRun.store_error`` says why.

Example::

    name: tiny-grid
    kind: bench                      # bench | plan | loadtest
    workloads:                       # name → that workload's config fields
      llm-train: {model: tiny-llama, seq_len: 32}
      resnet: {size: tiny, image_size: 32}
    precisions: [fp32, bf16]
    batch_sizes: [1, 2]
    layouts: [{}, {nproc_per_node: 2, zero: 3}]
    loop: {warmup_iterations: 2, warmup_time_s: 0, min_iterations: 5, min_time_s: 0.2}
"""

from __future__ import annotations

import itertools
import math
import socket
import traceback
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from accelkit.core import AccelkitError, UserError
from accelkit.core.spec import Spec, spec_field

if TYPE_CHECKING:
    from accelkit.bench.record import StoreWriter
    from accelkit.core import Estimate, Measurement, Workload
    from accelkit.loadtest import LoadTestConfig
    from accelkit.results import ResultStore

Kind = Literal["bench", "plan", "loadtest"]
BENCH_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
PLAN_PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
BENCH_LAYOUT_KEYS = ("nproc_per_node", "zero", "nnodes", "rdzv_endpoint", "node_rank", "backend",
                     "collective_timeout_s")
PLAN_LAYOUT_KEYS = ("dp", "tp", "pp", "ep", "zero", "grad_accum", "recompute", "sequence_parallel")
PLAN_CONFIG_KEYS = ("task", "seq_len", "prompt_len", "output_len", "optimizer")


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepSpec(Spec):
    """A sweep file. An axis left out has one value (the workload's or the command's default)."""

    name: str = spec_field(doc="Sweep name (stored with every point).")
    kind: Kind = spec_field("bench", doc="What each point runs: bench, plan or loadtest.")
    workloads: dict[str, dict[str, Any]] = spec_field(
        doc="bench: workload name → config fields; plan: model preset → task/seq_len/…; loadtest: served model → "
            "LoadTestConfig fields.")
    precisions: tuple[str, ...] | None = spec_field(None, doc="bench/plan: precisions (default fp32 bench, bf16 plan).")
    batch_sizes: tuple[int, ...] | None = spec_field(
        None, doc="bench: batch_size; plan: micro-batch (train) or batch (infer). Default: the workload's.")
    layouts: tuple[dict[str, Any], ...] | None = spec_field(
        None, doc="bench: {nproc_per_node, zero, …} ({} = one process); plan: {dp, tp, pp, ep, zero, …}.")
    rates: tuple[float | str, ...] | None = spec_field(None, doc="loadtest: request rates (req/s, or inf).")
    loop: dict[str, Any] = spec_field(default_factory=dict, doc="bench: LoopConfig fields (warm-up, stopping rule).")
    bench: dict[str, Any] = spec_field(default_factory=dict, doc="bench: BenchConfig fields (device, accuracy, …).")
    hardware: str | None = spec_field(None, doc="plan: catalog name, or cpu (uses this machine's probe).")
    loadtest: dict[str, Any] = spec_field(default_factory=dict, doc="loadtest: LoadTestConfig fields for every point.")
    workers: int = spec_field(1, min=1, max=1024, doc="Local pool size. Timed points on one machine should not overlap: 1.")
    resources: dict[str, float] = spec_field(
        default_factory=lambda: {"num_cpus": 1}, doc="Ray: resources each point asks for (num_cpus, num_gpus).")

    def validate(self) -> None:
        if not self.workloads:
            raise ValueError("workloads is empty; give at least one (name: {config fields})")
        for name, axis in (("precisions", self.precisions), ("batch_sizes", self.batch_sizes),
                           ("layouts", self.layouts), ("rates", self.rates)):
            if axis is not None and not axis:
                raise ValueError(f"{name} is empty; leave it out for the default, or give values")
        if self.kind == "loadtest":
            for name in ("precisions", "batch_sizes", "layouts"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} does not apply to kind loadtest (its axes: workloads, rates)")
        elif self.rates is not None:
            raise ValueError(f"rates applies to kind loadtest, not {self.kind}")
        if self.kind == "plan" and not self.hardware:
            raise ValueError("hardware is required for kind plan (a catalog name such as h100, or cpu)")
        choices = PLAN_PRECISIONS if self.kind == "plan" else BENCH_PRECISIONS
        for i, p in enumerate(self.precisions or ()):
            if p not in choices:
                raise ValueError(f"precisions[{i}]={p!r} is not valid; choose from {', '.join(choices)}")
        for i, b in enumerate(self.batch_sizes or ()):
            if b < 1:
                raise ValueError(f"batch_sizes[{i}]={b} is out of range; expected >= 1")
        keys = PLAN_LAYOUT_KEYS if self.kind == "plan" else BENCH_LAYOUT_KEYS
        for i, layout in enumerate(self.layouts or ()):
            if not isinstance(layout, dict):
                raise ValueError(f"layouts[{i}]={layout!r} is not valid; expected a mapping such as {{{keys[0]}: 2}}")
            unknown = sorted(set(layout) - set(keys))
            if unknown:
                raise ValueError(f"layouts[{i}] has no field {', '.join(unknown)}; known: {', '.join(keys)}")
            if self.kind == "bench" and layout:  # the launch's own checks, before any point runs
                self._check_launch(i, layout)
        for i, r in enumerate(self.rates or ()):
            _rate(r, f"rates[{i}]")
        self._check_repeats()
        if self.kind == "plan":
            for name, config in self.workloads.items():
                unknown = sorted(set(config or {}) - set(PLAN_CONFIG_KEYS))
                if unknown:
                    raise ValueError(f"workloads[{name!r}] has no field {', '.join(unknown)}; known: "
                                     + ", ".join(PLAN_CONFIG_KEYS))
        # what each point resolves when it runs, resolved now: a misspelt name fails the load, not every point
        {"bench": self._check_bench, "plan": self._check_plan, "loadtest": self._check_loadtest}[self.kind]()

    def _check_repeats(self) -> None:
        """A value given twice on an axis would measure the same points twice (and store them twice)."""
        rates = [_rate(r, f"rates[{i}]") for i, r in enumerate(self.rates or ())]
        for name, axis in (("precisions", self.precisions or ()), ("batch_sizes", self.batch_sizes or ()),
                           ("layouts", self.layouts or ()), ("rates", rates)):
            for j, value in enumerate(axis):
                i = list(axis).index(value)  # == compares layouts as mappings ({tp: 2, dp: 4} is {dp: 4, tp: 2})
                if i != j:
                    shown = _flow((self.rates or ())[j] if name == "rates" else value)
                    raise ValueError(f"{name}[{j}]={shown} repeats {name}[{i}]; give each value once (each point "
                                     "would run twice)")

    def _check_bench(self) -> None:
        """The workloads, their config fields (with each batch size), ``loop`` and ``bench`` as `_bench_point` reads
        them, and whether a torchrun layout can run each workload."""
        from accelkit.bench.runner import BenchConfig
        from accelkit.bench.workloads import get_workload
        from accelkit.distributed.parallel import SUPPORTED
        from accelkit.timing import LoopConfig

        try:
            loop = LoopConfig.from_dict(self.loop)
        except (ValueError, TypeError) as e:
            raise ValueError(f"loop: {e}") from None
        if "loop" in self.bench:
            raise ValueError("bench has no field loop; give the warm-up and stopping rule as the sweep's own loop: "
                             "{…} (it applies to every point)")
        try:
            BenchConfig.from_dict({**self.bench, "loop": loop.to_dict()})
        except (ValueError, TypeError) as e:
            raise ValueError(f"bench: {e}") from None
        launch = next(((i, layout) for i, layout in enumerate(self.layouts or ()) if layout), None)
        for name, config in self.workloads.items():
            try:
                cls = get_workload(name)
            except ValueError as e:
                raise ValueError(f"workloads: {e}") from None
            for b in self.batch_sizes or (None,):
                try:
                    cls.config_cls.from_dict({**config, **({"batch_size": b} if b is not None else {})})
                except (ValueError, TypeError) as e:
                    at = f" with batch_size {b} (batch_sizes)" if b is not None else ""
                    raise ValueError(f"workloads[{name!r}]{at}: {e}") from None
            if launch is not None and name not in SUPPORTED:  # as `bench bert --nproc-per-node 2` is refused
                raise ValueError(f"layouts[{launch[0]}]={_flow(launch[1])} is a torchrun launch, which runs the "
                                 f"training workloads {', '.join(SUPPORTED)}; {name} is not one — measure {name} in a "
                                 "sweep without launch layouts (layouts: [{}])")

    def _check_plan(self) -> None:
        """The hardware, the model presets, and each point's recipe and workload as `_plan_point` builds them."""
        from accelkit.hardware import get_device
        from accelkit.models import resolve_model
        from accelkit.plan.calibrate import LOCAL_NAMES

        hardware = str(self.hardware)
        if hardware.strip().lower() not in LOCAL_NAMES:  # cpu: this machine's probe, read when the point runs
            try:
                get_device(hardware)
            except ValueError as e:
                raise ValueError(f"hardware: {e}") from None
        for name in self.workloads:
            try:
                resolve_model(name)
            except (ValueError, OSError) as e:
                raise ValueError(f"workloads: {e}") from None
        for p in expand(self):
            try:
                _plan_workload(p)
            except (ValueError, TypeError) as e:
                raise ValueError(f"point {p.index} ({p.key}): {e}") from None

    def _check_loadtest(self) -> None:
        """Each point's LoadTestConfig as `_loadtest_point` builds it (the rate is checked above)."""
        for name, config in self.workloads.items():
            if "base_url" not in {**self.loadtest, **config}:  # the one field without a default
                raise ValueError("loadtest has no base_url; give the server's root for every point, e.g. loadtest: "
                                 "{base_url: http://127.0.0.1:8000}")
            try:
                _loadtest_config(name, config, self, math.inf)
            except (ValueError, TypeError) as e:
                raise ValueError(f"workloads[{name!r}]: {e}") from None

    def _check_launch(self, i: int, layout: dict[str, Any]) -> None:
        """A bench layout with keys is a torchrun launch: the checks `bench --nproc-per-node` makes before it."""
        from accelkit.distributed.launch import DistConfig

        if "nproc_per_node" not in layout:
            given = ", ".join(sorted(layout))
            raise ValueError(f"layouts[{i}] sets {given} but not nproc_per_node: a layout with keys is a torchrun "
                             "launch — give nproc_per_node (its processes per node), or {} for one process")
        try:
            dist = DistConfig.from_dict(layout)
        except (ValueError, TypeError) as e:
            raise ValueError(f"layouts[{i}]: {e}") from None
        if dist.backend == "nccl" and str(self.bench.get("device", "auto")) == "cpu":
            raise ValueError(f"layouts[{i}] backend nccl needs CUDA GPUs, but bench runs on the CPU (bench: "
                             "{device: cpu}); use backend gloo, or auto (NCCL on GPUs, gloo on CPUs)")


def _flow(value: Any) -> str:
    """A value as the sweep file writes it: {nproc_per_node: 2}, fp32, 2."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    return str(value)


def _rate(value: float | str, field_name: str) -> float:
    from accelkit.loadtest.config import parse_rate

    return parse_rate(str(value), field=field_name)


def load_sweep(path: str | Path) -> SweepSpec:
    """Read a sweep file; a YAML syntax error names the line and column, a bad value names the field."""
    import yaml

    path = Path(path)
    if path.is_dir():
        raise UserError(f"sweep file {str(path)!r} is a directory; give the YAML file itself (e.g. {path / 'sweep.yaml'})")
    if path.exists() and not path.is_file():  # /dev/zero, a FIFO: reading would never end
        raise UserError(f"sweep file {str(path)!r} is not a regular file; give a YAML file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"sweep file {str(path)!r} does not exist") from None
    except RecursionError:  # the YAML composer recurses per level: a file nested thousands deep
        raise UserError(f"sweep file {str(path)!r} nests lists or mappings too deeply to be a sweep") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"sweep file {str(path)!r} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as "
                        "UTF-8 YAML") from None
    except OSError as exc:
        raise UserError(f"sweep file {str(path)!r} cannot be read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise UserError(f"{path}:{where} is not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of fields (name, kind, workloads, …), got {type(data).__name__}")
    odd = [k for k in data if not isinstance(k, str)]
    if odd:
        raise UserError(f"{path}: {odd[0]!r} is not a field name; a sweep file's keys are name, kind, workloads, "
                        "precisions, batch_sizes, layouts, rates, …")
    data.setdefault("name", path.stem)
    if "workloads" not in data:  # the one field without a default (the dataclass would name __init__ instead)
        raise UserError(f"{path}: workloads is missing; give at least one, as name: {{config fields}} (e.g. "
                        "workloads: {resnet: {size: tiny}})")
    for key in ("workloads",):  # `llm-train:` with no config parses as None
        if isinstance(data.get(key), dict):
            data[key] = {k: (v or {}) for k, v in data[key].items()}
    try:
        return SweepSpec.from_dict(data)
    except (ValueError, TypeError) as exc:  # TypeError: a key that is not a string (`1: x`)
        raise UserError(f"{path}: {exc}") from None


# ---- the grid ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Point:
    """One cell of the grid."""

    index: int
    kind: str
    workload: str
    config: dict[str, Any]
    precision: str | None
    batch_size: int | None
    layout: dict[str, Any]
    rate: float | None

    @property
    def key(self) -> str:
        """A stable label: the same grid gives the same keys, whatever ran it."""
        parts = [self.workload + "".join(f" {k}={v}" for k, v in sorted(self.config.items()))]
        if self.precision:
            parts.append(self.precision)
        if self.batch_size is not None:
            parts.append(f"b{self.batch_size}")
        if self.layout:
            parts.append(",".join(f"{k}={v}" for k, v in sorted(self.layout.items())))
        if self.rate is not None:
            parts.append(f"rate {self.rate:g}")
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind, "workload": self.workload, "config": self.config,
                "precision": self.precision, "batch_size": self.batch_size, "layout": self.layout,
                "rate": None if self.rate is None else ("inf" if math.isinf(self.rate) else self.rate),
                "key": self.key}


def expand(spec: SweepSpec) -> list[Point]:
    """The product workloads × precisions × batch sizes × layouts × rates, in that nesting order."""
    default_precision = {"bench": "fp32", "plan": "bf16", "loadtest": None}[spec.kind]
    precisions = spec.precisions or (default_precision,)
    batches = spec.batch_sizes or (None,)
    layouts = spec.layouts or ({},)
    rates = [_rate(r, f"rates[{i}]") for i, r in enumerate(spec.rates)] if spec.rates else [None]
    cells = itertools.product(spec.workloads.items(), precisions, batches, layouts, rates)
    return [Point(i, spec.kind, name, dict(config), p, b, dict(layout), r)
            for i, ((name, config), p, b, layout, r) in enumerate(cells)]


# ---- one point (runs in a pool process or a Ray task) ---------------------------------------------------------
def store_identity() -> dict[str, str]:
    """Which results store a point wrote to (host + path)."""
    from accelkit.results.store import default_path

    return {"host": socket.gethostname(), "store": str(default_path().resolve())}


def run_point(point: dict[str, Any], spec: dict[str, Any], run_id: str, save: bool = True) -> dict[str, Any]:
    """Run one point against this machine's store. Never raises: the outcome says ok or error.

    ``save`` False (the driver's store has already refused a write): the point is measured and stores nothing. What
    the store does not take comes back whole in ``unstored`` (a bench point: its run document), with
    ``store_error`` saying why; after a refused write the point tries no other."""
    try:
        sweep = SweepSpec.from_dict(spec)
        p = Point(**{k: v for k, v in point.items() if k != "key"} | {"rate": None if point["rate"] is None
                                                                       else float(point["rate"])})
        store, store_error = _open_store(save)
        try:
            m = _measure(p, sweep, store, run_id, store_error)
            results = [store.get(i).to_dict() for i in m.result_ids] if store is not None else []
        finally:
            if store is not None:
                store.close()
        outcome = {"status": "ok", "result_ids": m.result_ids, "results": results, "unstored": m.unstored,
                   "store_error": m.store_error, "failed": m.failed, **store_identity()}
        if m.failed and not m.measured:
            # every variant raised (BatchNorm at batch 1, CUDA OOM): the point failed, as `accelkit bench` exits 1;
            # what it stored before (a prediction, a probe) stays listed with its error row
            outcome |= {"status": "error", "error": "; ".join(map(failure_text, m.failed)), "traceback": None}
        return outcome
    except Exception as exc:  # a point's failure is data, not the end of the sweep
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=8), **store_identity()}


def _open_store(save: bool) -> tuple[ResultStore | None, str | None]:
    """This machine's store, and why it cannot be written: writable with ``save``; otherwise — or when it cannot be
    opened for writing (the point's store error) — read-only, for the stored probes a bench reads (None when even
    that fails: the point is measured all the same)."""
    from accelkit.results import ResultStore

    error = None
    if save:
        try:
            return ResultStore(), None
        except AccelkitError as exc:
            error = str(exc)
    try:
        return ResultStore(readonly=True), error
    except AccelkitError:
        return None, error


def failure_text(failure: dict[str, Any]) -> str:
    """'fp32 (first call): ValueError: …' — a failed variant as `accelkit bench` prints it."""
    return f"{failure['name']} ({failure['phase']}): {failure['error']}"


@dataclass(frozen=True, slots=True)
class _Measured:
    """What one point's run left: its stored ids, the documents the store did not take (and why), the bench
    variants that raised (the run document's ``failed``: variant, phase, error) and whether anything was measured."""

    result_ids: list[int]
    unstored: list[dict[str, Any]]
    store_error: str | None
    failed: list[dict[str, Any]] = field(default_factory=list)
    measured: bool = True


def _measure(p: Point, sweep: SweepSpec, store: ResultStore | None, run_id: str, store_error: str | None) -> _Measured:
    """Run the point and store what it measured."""
    from accelkit.bench.record import StoreWriter

    writer = StoreWriter(store if store is not None and not store.readonly else None)
    if p.kind == "bench":
        doc = _bench_point(p, sweep, store, run_id, save=writer.can_write)
        unstored = [doc] if any(v.get("result_id") is None for v in doc["variants"]) else []
        return _Measured(list(doc["result_ids"]), unstored, store_error or doc.get("store_error"),
                         failed=list(doc["failed"]), measured=bool(doc["variants"]))
    result = _plan_point(p, sweep) if p.kind == "plan" else _loadtest_point(p, sweep)
    result_id = writer.add(result, run_id=run_id)
    if result_id is None:
        return _Measured([], [result.to_dict()], store_error or writer.error)
    return _Measured([result_id], [], None)


def _bench_point(p: Point, sweep: SweepSpec, store: ResultStore | None, run_id: str, *, save: bool) -> dict[str, Any]:
    """The run's document (what ``accelkit bench --json`` prints); ``store`` is written only with ``save``."""
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    config = {**p.config, **({"batch_size": p.batch_size} if p.batch_size is not None else {})}
    workload = make_workload(p.workload, config)
    bench = BenchConfig.from_dict({**sweep.bench, "loop": LoopConfig.from_dict(sweep.loop).to_dict()})
    bench = bench if save else bench.replace(save=False)
    variants = [Variant(precision=p.precision)]  # type: ignore[arg-type]
    if p.layout:
        from accelkit.distributed.bench_launch import run_distributed_bench
        from accelkit.distributed.launch import DistConfig

        return run_distributed_bench(workload, variants, bench, DistConfig.from_dict(p.layout), store=store,
                                     run_id=run_id).to_json()
    doc = run_benchmark(workload, variants, bench, store=store, run_id=run_id).to_json()
    if doc["interrupted"] and not doc["variants"]:  # Ctrl-C before its one variant finished: the point did not run
        raise KeyboardInterrupt                    # (as a distributed point's launcher raises it)
    return doc


def _plan_point(p: Point, sweep: SweepSpec) -> Estimate:
    from accelkit.core import Cluster
    from accelkit.plan import plan, resolve_hardware

    workload = _plan_workload(p)
    return plan(workload, Cluster(device=resolve_hardware(str(sweep.hardware)), num_devices=workload.recipe.num_devices))


def _plan_workload(p: Point) -> Workload:
    """The planner's workload for a plan point (also built when the file loads, to check it)."""
    from accelkit.core import Recipe, Workload
    from accelkit.models import resolve_model

    model = resolve_model(p.workload)
    c = dict(p.config)
    task = c.pop("task", "train")
    seq = c.pop("seq_len", None) or min(4096, model.max_seq_len or 4096)
    layout = dict(p.layout)
    batch = p.batch_size or 1
    recipe = Recipe(precision=p.precision, micro_batch=batch if task == "train" else 1, **layout)  # type: ignore[arg-type]
    return Workload(model=model, task=task, seq_len=seq, batch_size=batch, recipe=recipe, **c)


def _loadtest_config(name: str, config: dict[str, Any], sweep: SweepSpec, rate: float) -> LoadTestConfig:
    from accelkit.loadtest import LoadTestConfig

    return LoadTestConfig.from_dict({**sweep.loadtest, "model": name, **config, "request_rate": rate})


def _loadtest_point(p: Point, sweep: SweepSpec) -> Measurement:
    from accelkit.loadtest.runner import run_loadtest

    return run_loadtest(_loadtest_config(p.workload, p.config, sweep, p.rate if p.rate is not None else math.inf))


# ---- executors ---------------------------------------------------------------------------------------------


def _local(points: list[Point], spec: SweepSpec, run_id: str, workers: int,
           save: Callable[[], bool]) -> Generator[tuple[Point, dict[str, Any]], None, None]:
    """A spawn-context process pool (no fork of a process that may hold torch threads). A point is handed out when
    a worker is free, with ``save()`` as it stands then: once the store has refused a write, no point started
    later writes to it. On Ctrl-C no point is started; those running finish and are collected (a bench point
    keeps the variants it finished), then the interrupt goes on."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait

    todo = iter(points)
    running: dict[Future[dict[str, Any]], Point] = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        def start() -> None:
            for p in itertools.islice(todo, workers - len(running)):
                running[pool.submit(run_point, p.to_dict(), spec.to_dict(), run_id, save())] = p

        try:
            start()
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    point = running.pop(future)
                    yield point, _outcome(future)  # collected (and stored) before the next point starts
                start()
        except KeyboardInterrupt:
            for future in as_completed(running):
                if not isinstance(future.exception(), KeyboardInterrupt):  # a point Ctrl-C stopped is unfinished
                    yield running[future], _outcome(future)
            raise


def _outcome(future: Any) -> dict[str, Any]:
    try:
        return dict(future.result())
    except Exception as exc:  # the worker process died (BrokenProcessPool): that point failed
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": None,
                "host": socket.gethostname(), "store": None}


def _ray(points: list[Point], spec: SweepSpec, run_id: str, address: str,
         save: Callable[[], bool]) -> Generator[tuple[Point, dict[str, Any]], None, None]:
    """One Ray task per point (``spec.resources`` each), all handed to Ray at once: each writes to its node's store,
    and a point started before the driver's store refused a write still tries its own once. Connects to ``address``
    (auto, ray://…, HOST:PORT), or starts a local runtime for ``local``; a runtime already initialised in this
    process is used as is. Ctrl-C cancels the points not yet done."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray: pip install 'accelkit[ray]' (or pip install 'ray[default]')") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=None if address == "local" else address, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    try:
        task = ray.remote(run_point).options(**spec.resources)
        refs = {task.remote(p.to_dict(), spec.to_dict(), run_id, save()): p for p in points}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                try:
                    outcome = ray.get(done[0])
                except Exception as exc:  # the task's worker died or Ray could not run it
                    outcome = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": None,
                               "host": None, "store": None}
                yield refs[done[0]], outcome
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref)
            raise
    finally:
        if started:
            ray.shutdown()


# ---- collecting ------------------------------------------------------------------------------------------
def collect(point: Point, outcome: dict[str, Any], writer: StoreWriter, run_id: str, sweep: str) -> dict[str, Any]:
    """Land a point's outcome in the driver's store through ``writer`` (nothing is tried once a write failed): its
    rows (copied when it ran against another store), or a 'sweep-error' row. Returns the point's line of the
    summary; what no store took is in the line's ``unstored`` (whole documents: nothing measured is lost), with
    ``store_error``."""
    from accelkit.core import Estimate, Measurement
    from accelkit.results.finite_rows import NON_FINITE
    from accelkit.results.importing import remap_ids

    assert writer.store is not None  # a sweep always stores: the run id groups its rows
    line = {**point.to_dict(), "status": outcome["status"], "host": outcome.get("host"), "result_ids": [],
            "error": outcome.get("error")}
    if outcome.get("failed"):  # bench variants that raised: all of them made the point an error, some are listed
        line["failed"] = list(outcome["failed"])
    unstored: list[dict[str, Any]] = list(outcome.get("unstored") or [])
    store_error = outcome.get("store_error")
    here = {"host": socket.gethostname(), "store": str(writer.store.path.resolve())}
    # a point that ran (even one whose every variant raised) may have stored rows; a point that raised has none
    if "result_ids" in outcome and {"host": outcome["host"], "store": outcome["store"]} == here:
        line["result_ids"] = list(outcome["result_ids"])
        if store_error is not None and writer.error is None:
            writer.error = store_error  # the driver's own store refused the point's write: the driver tries no more
    elif "result_ids" in outcome:
        mapping: dict[int, int] = {}
        for row in outcome["results"]:  # in id order: estimates come before the measurements that cite them
            data = {k: v for k, v in row.items() if k not in ("id", "run_id", "type", NON_FINITE)}
            data["details"] = remap_ids(data.get("details", {}), mapping)
            result = Measurement.from_dict(data) if row["type"] == "measurement" else Estimate.from_dict(data)
            copied = writer.add(result, run_id=run_id)
            if copied is None:
                unstored.append(row)
            else:
                mapping[row["id"]] = copied
        line["result_ids"] = [mapping[i] for i in outcome["result_ids"] if i in mapping]
    if outcome["status"] != "ok":
        error = Measurement(kind="sweep-error", name=f"{sweep} · point {point.index} · {point.key}", details={
            "sweep": sweep, "point": point.to_dict(), "error": outcome.get("error"),
            "traceback": outcome.get("traceback"), "host": outcome.get("host"),
            **({"failed": line["failed"]} if "failed" in line else {})})
        error_id = writer.add(error, run_id=run_id)
        if error_id is None:
            unstored.append(error.to_dict())
        else:
            line["result_ids"].append(error_id)
    if point.kind == "plan" and outcome["status"] == "ok":  # a plan that does not fit is no candidate, whatever
        plans = [r for r in [*outcome.get("results", []), *unstored] if r.get("kind") == "plan"]  # its tokens/s
        if plans:
            line["fits"] = bool(plans[0]["details"].get("fits"))
    if unstored:
        line["unstored"] = unstored
        if (why := store_error or writer.error) is not None:
            line["store_error"] = why
    return line


@dataclass(slots=True)
class SweepRun:
    """What ``run_sweep`` returns; ``points`` are in grid order (the points finished, when interrupted)."""

    name: str
    kind: str
    run_id: str
    executor: str
    points: list[dict[str, Any]] = field(default_factory=list)
    summary_id: int | None = None
    interrupted: bool = False  # Ctrl-C: ``unfinished`` lists the points that did not run
    unfinished: list[str] = field(default_factory=list)
    #: why a store refused a write: the points' ``unstored`` documents and (when it is the driver's) the summary
    #: were not stored, and nothing more was written to that store
    store_error: str | None = None

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [p for p in self.points if p["status"] != "ok"]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "run_id": self.run_id, "executor": self.executor,
                "num_points": len(self.points), "num_failed": len(self.failed), "summary_id": self.summary_id,
                "interrupted": self.interrupted, "unfinished": self.unfinished, "points": self.points,
                **({"store_error": self.store_error} if self.store_error is not None else {})}


def run_sweep(spec: SweepSpec, *, ray: str | None = None, workers: int | None = None,
              store: ResultStore | None = None, run_id: str | None = None,
              on_point: Callable[[dict[str, Any]], None] | None = None) -> SweepRun:
    """Run every point of ``spec``; each lands in ``store`` (default: this machine's) under one run id. A store that
    refuses a write fails nothing: what it did not take is in the result (``store_error`` says why), and no later
    write to it is tried. Ctrl-C stops the sweep with the points finished so far (``interrupted``)."""
    from accelkit.bench.record import StoreWriter
    from accelkit.core import Measurement
    from accelkit.results import ResultStore

    points = expand(spec)
    run = SweepRun(spec.name, spec.kind, run_id or uuid.uuid4().hex[:12], f"ray ({ray})" if ray else
                   f"local process pool ({workers or spec.workers} workers)")
    own = store is None
    writer = StoreWriter(store or ResultStore())
    lines: dict[int, dict[str, Any]] = {}
    try:
        outcomes = (_ray(points, spec, run.run_id, ray, lambda: writer.can_write) if ray else
                    _local(points, spec, run.run_id, workers or spec.workers, lambda: writer.can_write))
        try:
            for point, outcome in outcomes:
                lines[point.index] = collect(point, outcome, writer, run.run_id, spec.name)
                if on_point is not None:
                    on_point(lines[point.index])
        except KeyboardInterrupt:  # as bench keeps its finished variants: the points collected are summed up
            run.interrupted = True
        finally:
            outcomes.close()  # an interrupt that landed here, not in the executor: it starts no more points
        run.points = [lines[i] for i in sorted(lines)]
        run.unfinished = [f"point {p.index} · {p.key}" for p in points if p.index not in lines]
        summary = Measurement(kind="sweep", name=f"sweep {spec.name}: {len(points)} points, {len(run.failed)} failed"
                              + (f", {len(run.unfinished)} not run (interrupted)" if run.interrupted else ""),
                              details={"sweep": spec.name, "executor": run.executor, "grid": spec.to_dict(),
                                       "interrupted": run.interrupted, "unfinished": run.unfinished,
                                       "points": run.points})
        run.summary_id = writer.add(summary, run_id=run.run_id)
        run.store_error = writer.error or next((p["store_error"] for p in run.points if p.get("store_error")), None)
    finally:
        if own and writer.store is not None:
            writer.store.close()
    return run
