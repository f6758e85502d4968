"""A sweep file: :class:`SweepSpec` (its fields, checked when it loads: a misspelt name or a layout the launch
would refuse fails the load, not every point) and :func:`load_sweep` (YAML → SweepSpec; errors name the field).

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

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from accelkit.bench.runner import BenchConfig
from accelkit.bench.workloads import get_workload
from accelkit.core import UserError
from accelkit.core.errors import closest
from accelkit.core.spec import Spec, spec_field
from accelkit.distributed.launch import DistConfig
from accelkit.hardware import get_device
from accelkit.models import resolve_model
from accelkit.plan.calibrate import LOCAL_NAMES
from accelkit.sweep.grid import expand, loadtest_config, parse_rate, plan_workload
from accelkit.timing import LoopConfig

Kind = Literal["bench", "plan", "loadtest"]
BENCH_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
PLAN_PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
BENCH_LAYOUT_KEYS = ("nproc_per_node", "zero", "nnodes", "rdzv_endpoint", "node_rank", "backend",
                     "collective_timeout_s")
PLAN_LAYOUT_KEYS = ("dp", "tp", "pp", "ep", "zero", "grad_accum", "recompute", "sequence_parallel")
PLAN_CONFIG_KEYS = ("task", "seq_len", "prompt_len", "output_len", "optimizer")
#: the numeric options of a Ray task that a sweep's ``resources`` may set (Ray refuses any other keyword)
RESOURCE_KEYS = ("num_cpus", "num_gpus", "memory", "object_store_memory", "max_retries")
#: a valid server root, standing in for the one a loadtest point takes from the section not being checked
_ANY_BASE_URL = "http://127.0.0.1:8000"


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

    def __post_init__(self) -> None:
        # YAML reads `nnodes: 2` as an int, and the launch's nnodes is text (N, or MIN:MAX): the layout was refused
        # "nnodes=2 is not valid; expected a string" (found in review). A whole number of nodes is taken as its text.
        if isinstance(self.layouts, (tuple, list)):
            object.__setattr__(self, "layouts", tuple(_nnodes_as_text(layout) for layout in self.layouts))
        Spec.__post_init__(self)

    def validate(self) -> None:
        if not self.workloads:
            raise ValueError("workloads is empty; give at least one (name: {config fields})")
        self._check_axes()
        self._check_values()
        self._check_layouts()
        for i, r in enumerate(self.rates or ()):
            parse_rate(r, f"rates[{i}]")
        self._check_repeats()
        self._check_resources()
        if self.kind == "plan":
            for name, config in self.workloads.items():
                unknown = sorted(set(config or {}) - set(PLAN_CONFIG_KEYS))
                if unknown:
                    raise ValueError(f"workloads[{name!r}] has no field {', '.join(unknown)}; known: "
                                     + ", ".join(PLAN_CONFIG_KEYS))
        # what each point resolves when it runs, resolved now: a misspelt name fails the load, not every point
        {"bench": self._check_bench, "plan": self._check_plan, "loadtest": self._check_loadtest}[self.kind]()

    def _check_axes(self) -> None:
        """Which axes are given, and whether they apply to the kind."""
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
        # the sections only one kind reads: given to another they were dropped without a word (`loop:` in a plan
        # sweep, `hardware: h100` in a bench sweep — which measures the machine it runs on; found in the hunt)
        for name, kind, given in (("loop", "bench", bool(self.loop)), ("bench", "bench", bool(self.bench)),
                                  ("hardware", "plan", self.hardware is not None),
                                  ("loadtest", "loadtest", bool(self.loadtest))):
            if given and self.kind != kind:
                raise ValueError(f"{name} applies to kind {kind}, not {self.kind} (no {self.kind} point reads it); "
                                 f"remove it, or set kind: {kind}")
        if self.kind == "plan" and not self.hardware:
            raise ValueError("hardware is required for kind plan (a catalog name such as h100, or cpu)")

    def _check_values(self) -> None:
        """Each precision is one the kind knows, each batch size ≥ 1."""
        choices = PLAN_PRECISIONS if self.kind == "plan" else BENCH_PRECISIONS
        for i, p in enumerate(self.precisions or ()):
            if p not in choices:
                raise ValueError(f"precisions[{i}]={p!r} is not valid; choose from {', '.join(choices)}")
        for i, b in enumerate(self.batch_sizes or ()):
            if b < 1:
                raise ValueError(f"batch_sizes[{i}]={b} is out of range; expected >= 1")

    def _check_layouts(self) -> None:
        """Each layout is a mapping of the kind's layout keys (a bench launch: checked as the launch checks it)."""
        keys = PLAN_LAYOUT_KEYS if self.kind == "plan" else BENCH_LAYOUT_KEYS
        for i, layout in enumerate(self.layouts or ()):
            if not isinstance(layout, dict):
                raise ValueError(f"layouts[{i}]={layout!r} is not valid; expected a mapping such as {{{keys[0]}: 2}}")
            unknown = sorted(set(layout) - set(keys))
            if unknown:
                raise ValueError(f"layouts[{i}] has no field {', '.join(unknown)}; known: {', '.join(keys)}")
            if self.kind == "bench" and layout:  # the launch's own checks, before any point runs
                self._check_launch(i, layout)

    def _check_resources(self) -> None:
        """What each Ray task asks for, checked as Ray checks it (a misspelt `num_gpu`, a negative or a fractional
        count above 1 was an internal error once Ray had started — found in the hunt); an infinite one is left to the
        CLI's finite-number check."""
        for key, value in self.resources.items():
            if key not in RESOURCE_KEYS:
                near = closest(key, RESOURCE_KEYS)
                hint = f"did you mean {near}? " if near else ""
                raise ValueError(f"resources has no field {key}; {hint}known: {', '.join(RESOURCE_KEYS)}")
            if not math.isfinite(value) or key == "max_retries":  # (max_retries -1: retry without end, as Ray)
                continue
            if value < 0:
                raise ValueError(f"resources.{key}={value:g} is out of range; expected >= 0")
            if key in ("num_cpus", "num_gpus") and value > 1 and not float(value).is_integer():
                raise ValueError(f"resources.{key}={value:g} is not valid; above 1 Ray takes whole {key[4:]} only "
                                 f"(e.g. {math.floor(value)} or {math.ceil(value)}; a fraction below 1 shares one)")

    def _check_repeats(self) -> None:
        """A value given twice on an axis would measure the same points twice (and store them twice)."""
        rates = [parse_rate(r, f"rates[{i}]") for i, r in enumerate(self.rates or ())]
        for name, axis in (("precisions", self.precisions or ()), ("batch_sizes", self.batch_sizes or ()),
                           ("layouts", self.layouts or ()), ("rates", rates)):
            for j, value in enumerate(axis):
                i = list(axis).index(value)  # == compares layouts as mappings ({tp: 2, dp: 4} is {dp: 4, tp: 2})
                if i != j:
                    shown = _flow((self.rates or ())[j] if name == "rates" else value)
                    raise ValueError(f"{name}[{j}]={shown} repeats {name}[{i}]; give each value once (each point "
                                     "would run twice)")

    def _check_bench(self) -> None:
        """The workloads, their config fields (with each batch size), ``loop`` and ``bench`` as `accelkit.sweep.point`
        reads them, and whether a torchrun layout can run each workload."""
        # lazy: the torchrun launcher's modules (accelkit.distributed) load only for a multi-process run
        from accelkit.distributed.parallel import SUPPORTED

        try:
            loop = LoopConfig.from_dict(self.loop)
        except (ValueError, TypeError) as e:
            raise ValueError(f"loop: {e}") from None
        if "loop" in self.bench:
            raise ValueError("bench has no field loop; give the warm-up and stopping rule as the sweep's own loop: "
                             "{…} (it applies to every point)")
        if "save" in self.bench:  # (false measured every point, stored none: a table of '-' and no result ids)
            raise ValueError("bench has no field save; a sweep stores every point it measures (its table and "
                             "`accelkit results list --run` read them back): to measure without storing, run "
                             "`accelkit bench … --no-save`")
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
        """The hardware, the model presets, and each point's recipe and workload as `accelkit.sweep.point` builds them."""
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
                plan_workload(p)
            except (ValueError, TypeError) as e:
                raise ValueError(f"point {p.index} ({p.key}): {e}") from None

    def _check_loadtest(self) -> None:
        """Each point's LoadTestConfig as `accelkit.sweep.point` builds it (the rate is checked above); an error names
        the section its value came from (see :meth:`_loadtest_section`)."""
        # fields a point sets itself: given in the file they were silently replaced (`loadtest: {request_rate: 5}`
        # ran every point at inf, `loadtest: {model: other}` served the workload's name)
        for section, fields in (("loadtest", self.loadtest),
                                *((f"workloads[{name!r}]", config) for name, config in self.workloads.items())):
            if "request_rate" in fields:
                raise ValueError(f"{section} sets request_rate, which a sweep point does not read: its rate comes "
                                 f"from the sweep's rates axis; give rates: [{_flow(fields['request_rate'])}] instead")
        if "model" in self.loadtest:
            raise ValueError(f"loadtest sets model={_flow(self.loadtest['model'])}, which a sweep point does not "
                             "read: each point serves its workload's name (or its own model field); name the "
                             "served model under workloads instead")
        for name, config in self.workloads.items():
            if "base_url" not in {**self.loadtest, **config}:  # the one field without a default
                raise ValueError("loadtest has no base_url; give the server's root for every point, e.g. loadtest: "
                                 "{base_url: http://127.0.0.1:8000}")
            try:
                loadtest_config(name, config, self.loadtest, math.inf)
            except (ValueError, TypeError) as e:
                raise ValueError(f"{self._loadtest_section(name, config, str(e))}: {e}") from None

    def _loadtest_section(self, name: str, config: dict[str, Any], error: str) -> str:
        """Where the point ``name``'s failing ``error`` comes from: 'loadtest' when the shared section's fields that
        this workload does not set fail alone with it, 'workloads[name]' when the workload's own fields do, else
        'workloads[name] with loadtest' (a rule both break together). `loadtest: {slo: {ttft_ms: 1.0e+400}}` was
        reported as "workloads['m']: ttft_ms=inf …", in a section that has no ttft_ms."""
        shared = {k: v for k, v in self.loadtest.items() if k not in config}  # what the point takes from loadtest
        # the other section left out: a base_url that only it gives, and for the shared section the workload's name
        # (an empty one is the workload's error), stand in as any valid one would
        for section, model, fields, own in (("loadtest", "model", shared, {}),
                                            (f"workloads[{name!r}]", name, {}, config)):
            try:
                loadtest_config(model, own, {"base_url": _ANY_BASE_URL, **fields}, math.inf)
            except (ValueError, TypeError) as e:
                if str(e) == error:
                    return section
        return f"workloads[{name!r}] with loadtest"

    def _check_launch(self, i: int, layout: dict[str, Any]) -> None:
        """A bench layout with keys is a torchrun launch: the checks `bench --nproc-per-node` makes before it."""
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


def _nnodes_as_text(layout: Any) -> Any:
    """``layout`` with an integer ``nnodes`` as its text (a bool is no node count: left for the check to refuse)."""
    if isinstance(layout, dict) and type(layout.get("nnodes")) is int:
        return {**layout, "nnodes": str(layout["nnodes"])}
    return layout


def _sweep_loader() -> Any:
    """PyYAML's safe loader, except that digits joined by colons (``2:4``) are text: YAML 1.1 reads them as a
    base-60 integer, so an elastic ``nnodes: 2:4`` arrived as 124 — which, now that an integer node count is taken,
    would have run as 124 nodes. Nothing in a sweep file is written in base 60."""
    import re

    import yaml

    class SweepLoader(yaml.SafeLoader):  # type: ignore[misc]  # (PyYAML has no type stubs here)
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            """A key given twice is refused: PyYAML keeps the last silently, so a second `llama-3-8b:` under
            workloads (or a second `precisions:`) dropped the first from the grid without a word (found in review)."""
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, Any] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` overrides by design
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.setdefault(key, key_node.start_mark)
                    except TypeError:  # an unhashable key: the constructor's own error says so
                        continue
                    if first is not key_node.start_mark:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"{key} is given twice (first on line {first.line + 1}), and only the last "
                            "would be used; give each key once", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    resolvers = {first: list(rs) for first, rs in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    text = ("tag:yaml.org,2002:str", re.compile(r"^[0-9]+(?::[0-9]+)+$"))
    for digit in "0123456789":  # before the int resolver: the first that matches decides
        resolvers.setdefault(digit, []).insert(0, text)
    SweepLoader.yaml_implicit_resolvers = resolvers
    return SweepLoader


def _flow(value: Any) -> str:
    """A value as the sweep file writes it: {nproc_per_node: 2}, fp32, 2."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    return str(value)


#: each axis: what one of its values is, and an example list (for the error that names a value of the wrong type)
_AXES: dict[str, tuple[tuple[type, ...], str, str]] = {
    "precisions": ((str,), "a precision name", "[fp32, bf16]"),
    "batch_sizes": ((int,), "an integer", "[1, 2, 4]"),
    "layouts": ((dict,), "a mapping", "[{}, {nproc_per_node: 2}]"),
    "rates": ((int, float, str), "a number or inf", "[1, 4, inf]"),
}


def _check_axis_types(path: Path, data: dict[str, Any]) -> None:
    """An axis is a list of values of its type: `batch_sizes: 4` and `batch_sizes: [a]` were refused as "expected
    tuple[int, ...] or None", which names no fix (found in review)."""
    for axis, (types, what, example) in _AXES.items():
        if axis == "layouts" and data.get("kind") == "plan":
            example = "[{dp: 8}, {tp: 2, dp: 4}]"
        value = data.get(axis)
        if value is None:
            continue
        if not isinstance(value, list):
            one = f"; for the one value write {axis}: [{_flow(value)}]" if isinstance(value, (*types, dict)) else ""
            raise UserError(f"{path}: {axis}={_flow(value)} is not valid; expected a list such as {axis}: "
                            f"{example}{one}")
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, types):
                raise UserError(f"{path}: {axis}[{i}]={_flow(item)} is not valid; expected {what}, as in {axis}: "
                                f"{example}")


def load_sweep(path: str | Path) -> SweepSpec:
    """Read a sweep file; a YAML syntax error names the line and column, a bad value names the field."""
    import yaml

    path = Path(path)
    if path.is_dir():
        raise UserError(f"sweep file {str(path)!r} is a directory; give the YAML file itself (e.g. {path / 'sweep.yaml'})")
    if path.exists() and not path.is_file():  # /dev/zero, a FIFO: reading would never end
        raise UserError(f"sweep file {str(path)!r} is not a regular file; give a YAML file")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_sweep_loader())  # a SafeLoader: no Python objects
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
    _check_axis_types(path, data)
    try:
        return SweepSpec.from_dict(data)
    except (ValueError, TypeError) as exc:  # TypeError: a key that is not a string (`1: x`)
        raise UserError(f"{path}: {exc}") from None
