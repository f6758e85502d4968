"""A model's and an accelerator's numbers are finite, through the Python API as through config.json
(test_hf_config_non_finite.py) and the CLI (test_cli_non_finite.py): ``DeviceSpec(memory_bandwidth_bytes_per_s=
math.inf)`` planned Llama-3.1-8B decode on an H100 at 8,386 tokens/s instead of 1,145, with no word of it, and a
``ModelSpec(rope_theta=math.inf)`` was planned as given. Each refusal is one line naming the field and the fix."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import typing
from typing import Any, get_args

import pytest

from accelkit.core import Cluster, DeviceSpec, ModelSpec
from accelkit.core.spec import Spec, finite_fix
from accelkit.hardware import get_device, list_devices
from accelkit.models import get_preset
from accelkit.models.presets import PRESETS

H100 = get_device("h100")
LLAMA = get_preset("llama-3.1-8b")  # rope_scaling llama3: factor 8.0, low/high_freq_factor 1.0/4.0


@pytest.mark.parametrize(("build", "expected"), [
    (lambda: H100.replace(memory_bandwidth_bytes_per_s=math.inf),
     "memory_bandwidth_bytes_per_s=inf is not a finite number; expected a bandwidth in bytes/s such as 5e11"),
    (lambda: H100.replace(scaleup_bandwidth_bytes_per_s=math.inf),
     "scaleup_bandwidth_bytes_per_s=inf is not a finite number; expected a bandwidth in bytes/s such as 5e11"),
    (lambda: H100.replace(per_peer_bandwidth_bytes_per_s=float("1e400")),  # read as inf
     "per_peer_bandwidth_bytes_per_s=inf is not a finite number; expected a bandwidth in bytes/s such as 5e11"),
    (lambda: H100.replace(tdp_w=math.inf), "tdp_w=inf is not a finite number; expected watts such as 700"),
    (lambda: H100.replace(memory_datasheet_gb=math.inf),
     "memory_datasheet_gb=inf is not a finite number; expected gigabytes such as 80"),
    (lambda: H100.replace(peak_flops={**H100.peak_flops, "bf16": math.inf}),
     "peak_flops['bf16']=inf is not a finite number; expected a dense peak in FLOP/s such as 9.89e14"),
    (lambda: DeviceSpec.from_dict({**H100.to_dict(), "memory_bandwidth_bytes_per_s": math.inf}),
     "memory_bandwidth_bytes_per_s=inf is not a finite number; expected a bandwidth in bytes/s such as 5e11"),
    # the field's own default is the example
    (lambda: Cluster(device=H100, scaleout_bandwidth_bytes_per_s=math.inf),
     "scaleout_bandwidth_bytes_per_s=inf is not a finite number; expected a bandwidth in bytes/s such as 5e10"),
    (lambda: LLAMA.replace(rope_theta=math.inf),
     "rope_theta=inf is not a finite number; expected a number such as 10000"),
    (lambda: LLAMA.replace(norm_eps=math.inf), "norm_eps=inf is not a finite number; expected a number such as 1e-05"),
    (lambda: LLAMA.replace(rope_scaling={**(LLAMA.rope_scaling or {}), "factor": math.inf}),
     "rope_scaling['factor']=inf is not a finite number; expected a number such as 1"),
    # an integer no float holds (config.json's reader refuses it as it reads it)
    (lambda: LLAMA.replace(rope_scaling={**(LLAMA.rope_scaling or {}), "factor": 10**400}),
     "rope_scaling['factor']=an integer of 401 digits is not a finite number; expected a number such as 1"),
])
def test_an_infinite_figure_is_refused_naming_the_field_and_the_fix(build, expected):
    with pytest.raises(ValueError) as info:
        build()
    assert str(info.value) == expected


def test_bounds_and_nan_keep_their_words():
    """-inf is below 0 (the range message, as before), a peak's -inf is ≤ 0, and NaN is refused as it was."""
    with pytest.raises(ValueError, match=r"^tdp_w=-inf is out of range; expected >= 0.0$"):
        H100.replace(tdp_w=-math.inf)
    with pytest.raises(ValueError, match=r"^peak_flops\['fp8'\]=-inf must be > 0 \(omit unsupported dtypes\)$"):
        H100.replace(peak_flops={"fp8": -math.inf})
    with pytest.raises(ValueError, match=r"^rope_scaling=\{'factor': nan\} is not valid; expected dict"):
        LLAMA.replace(rope_scaling={"factor": math.nan})


def test_the_fix_words_of_these_fields():
    """The table's words for these names (bytes/s is no longer 'seconds' by its _s ending); the others' unchanged."""
    assert finite_fix("memory_bandwidth_bytes_per_s") == "a bandwidth in bytes/s such as 5e11"
    assert finite_fix("tdp_w") == "watts such as 700"
    assert finite_fix("memory_datasheet_gb") == "gigabytes such as 80"
    assert finite_fix("scaleout_gbps") == "a bandwidth in Gb/s such as 400"
    assert finite_fix("warmup_timeout_s") == "seconds such as 0.05"
    assert finite_fix("target_tokens_per_s") == "a throughput in tokens/s such as 2e6"


#: float fields of these specs that take inf on purpose, each with why (anything else must be finite): none today —
#: a device's "no limit" is a missing figure (None, or a dtype left out of peak_flops), never inf
TAKES_INF: dict[str, str] = {}

#: float values inside a container field, refused by the spec's validate (which the guard proves with ``sample``)
IN_CONTAINERS: dict[str, Any] = {
    "DeviceSpec.peak_flops": lambda: H100.replace(peak_flops={"bf16": math.inf}),
    "ModelSpec.rope_scaling": lambda: LLAMA.replace(rope_scaling={"rope_type": "linear", "factor": math.inf}),
}


def _specs() -> list[type[Spec]]:
    """ModelSpec, DeviceSpec, Cluster and any other Spec defined beside them (accelkit/core/model.py, device.py)."""
    found: dict[str, type[Spec]] = {c.__name__: c for c in (ModelSpec, DeviceSpec, Cluster)}
    for name in ("accelkit.core.model", "accelkit.core.device"):
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, Spec) and obj.__module__ == name:
                found[obj.__name__] = obj
    return list(found.values())


def _holds_float(tp: Any) -> bool:
    return tp is float or any(_holds_float(a) for a in get_args(tp))


def test_every_float_of_these_specs_is_finite_or_says_why_not():
    """A new float field of a model or device spec refuses inf (``finite=True``, or both bounds) unless it is listed
    above with the reason inf means something there; a float inside a container is refused by the spec's validate
    (listed in IN_CONTAINERS, whose sample proves it), as the spec_field flag covers only a field's own value."""
    unchecked, seen = [], set()
    for spec in _specs():
        hints = typing.get_type_hints(spec)
        for f in dataclasses.fields(spec):  # type: ignore[arg-type]
            if not _holds_float(hints[f.name]):
                continue
            name = f"{spec.__name__}.{f.name}"
            seen.add(name)
            if hints[f.name] not in (float, float | None):
                if name not in IN_CONTAINERS:
                    unchecked.append(name)
                continue
            bounded = f.metadata.get("min") is not None and f.metadata.get("max") is not None
            if not (f.metadata.get("finite") or bounded or name in TAKES_INF):
                unchecked.append(name)
    assert unchecked == []
    assert set(TAKES_INF) | set(IN_CONTAINERS) <= seen  # the lists name real fields
    assert {"ModelSpec.rope_theta", "DeviceSpec.memory_bandwidth_bytes_per_s", "DeviceSpec.peak_flops",
            "Cluster.scaleout_bandwidth_bytes_per_s"} <= seen  # the walk found the specs
    for sample in IN_CONTAINERS.values():
        with pytest.raises(ValueError, match="is not a finite number"):
            sample()
    # nothing the package ships relies on inf: each catalog device and model preset is built (and checked) as it was
    for device in list_devices():
        assert DeviceSpec.from_dict(device.to_dict()) == device
        assert Cluster(device=device).scaleout_bandwidth_bytes_per_s == 50e9
    for make in PRESETS.values():
        assert ModelSpec.from_dict(make().to_dict()) == make()
