"""A spec field declared ``finite=True`` refuses inf and -inf in one line naming the field and what to give instead,
as the CLI's flags do (test_cli_non_finite.py): through the Python API ``PlanOptions(target_tokens_per_s=math.inf)``
searched 65,536 devices and `LLMTrainConfig(lr=math.inf)` trained at lr=inf. A field where inf means something
keeps it (a load test's request rate: every request at once), and so do fields that do not declare it."""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
import typing
from dataclasses import dataclass

import pytest

import accelkit.bench.workloads
import accelkit.loadtest
import accelkit.plan
from accelkit.bench.workloads.custom import CustomConfig
from accelkit.bench.workloads.llm_train import LLMTrainConfig
from accelkit.bench.workloads.resnet import ResNetConfig
from accelkit.core.recipe import Recipe
from accelkit.core.spec import Spec, finite_fix, spec_field
from accelkit.loadtest.config import SLO, LoadTestConfig
from accelkit.plan.options import PlanOptions
from accelkit.plan.request import PlanRequest

COMPARE = {"compare": "h100,h200", "compare_basis": "budget"}


@pytest.mark.parametrize(("spec", "given", "expected"), [
    (PlanOptions, {"target_tokens_per_s": math.inf},
     "target_tokens_per_s=inf is not a finite number; expected a throughput in tokens/s such as 2e6"),
    (PlanOptions, {"max_decode_latency_s": math.inf},
     "max_decode_latency_s=inf is not a finite number; expected seconds such as 0.05"),
    (PlanOptions, {"price_per_device_hour": math.inf},
     "price_per_device_hour=inf is not a finite number; expected dollars per hour such as 100"),
    (PlanRequest, {"hardware": "h100", "scaleout_gbps": math.inf},
     "scaleout_gbps=inf is out of range; expected <= 10000000.0"),  # bounded since 1e300 Gb/s overflowed to inf
    (PlanRequest, {**COMPARE, "budget_per_hour": math.inf},
     "budget_per_hour=inf is not a finite number; expected dollars per hour such as 100"),
    # the workload's own default is the example
    (LLMTrainConfig, {"lr": math.inf}, "lr=inf is not a finite number; expected a learning rate such as 0.0001"),
    (ResNetConfig, {"lr": math.inf}, "lr=inf is not a finite number; expected a learning rate such as 0.1"),
    (CustomConfig, {"module": "m:f", "lr": math.inf},
     "lr=inf is not a finite number; expected a learning rate such as 0.001"),
    (Recipe, {"grad_compression": "powersgd", "powersgd_min_compression_rate": math.inf},
     "powersgd_min_compression_rate=inf is not a finite number; expected a number such as 2"),
    # 1e400 is read as inf: the same refusal
    (SLO, {"ttft_ms": float("1e400")}, "ttft_ms=inf is not a finite number; expected milliseconds such as 200"),
])
def test_an_infinite_number_is_refused_naming_the_field_and_the_fix(spec, given, expected):
    with pytest.raises(ValueError) as info:
        spec(**given)
    assert str(info.value) == expected


def test_the_refusal_holds_for_a_spec_read_from_a_dict():
    """A stored or hand-written config reaches the spec through from_dict: a nested SLO of inf is refused too."""
    with pytest.raises(ValueError, match=r"^tpot_ms=inf is not a finite number; expected milliseconds such as 200$"):
        LoadTestConfig.from_dict({"base_url": "http://h", "model": "m", "slo": {"tpot_ms": math.inf}})
    with pytest.raises(ValueError, match=r"^target_tokens_per_s=inf is not a finite number"):
        PlanOptions.from_dict({"target_tokens_per_s": math.inf})


def test_bounds_keep_their_words_and_nan_its_own():
    """The bounds come first (-inf is below 0, as before), and NaN is refused in every float field as before."""
    with pytest.raises(ValueError, match=r"^target_tokens_per_s=-inf is out of range; expected >= 0.0$"):
        PlanOptions(target_tokens_per_s=-math.inf)
    with pytest.raises(ValueError, match=r"^lr is NaN; expected a number$"):
        LLMTrainConfig(lr=math.nan)
    with pytest.raises(ValueError, match=r"^activity_factor=inf is out of range; expected <= 1.0$"):
        PlanOptions(activity_factor=math.inf)


def test_inf_stays_where_it_means_something():
    """A load test's request rate inf sends every request at once (its default); a field that does not declare
    ``finite`` takes inf, as results' figures do (a ratio over a zero reference)."""
    assert LoadTestConfig(base_url="http://h", model="m").request_rate == math.inf
    assert LoadTestConfig(base_url="http://h", model="m", sweep_rates=(1.0, math.inf)).rates == (1.0, math.inf)

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Demo(Spec):
        ratio: float | None = spec_field(None, min=0.0, doc="May be inf.")
        lr: float = spec_field(1e-3, min=0.0, finite=True, doc="May not.")

    assert Demo(ratio=math.inf).ratio == math.inf
    assert Demo(lr=2.0).lr == 2.0  # a finite value passes
    with pytest.raises(ValueError, match=r"^lr=inf is not a finite number; expected a learning rate such as 0.001$"):
        Demo(lr=math.inf)


def test_finite_fix_words():
    assert finite_fix("target_tokens_per_s") == "a throughput in tokens/s such as 2e6"
    assert finite_fix("budget_per_hour") == finite_fix("price_per_device_hour") == "dollars per hour such as 100"
    assert finite_fix("lr", 0.1) == "a learning rate such as 0.1"
    assert finite_fix("lr", math.inf) == finite_fix("lr", 0.0) == "a learning rate such as 1e-3"  # no finite default
    assert finite_fix("rate", True) == "a number such as 1"


#: float fields of the owned specs that take inf on purpose, each with why (anything else must be finite)
TAKES_INF = {
    "LoadTestConfig.request_rate": "inf sends every request at once (vllm bench serve's default)",
    # refused by LoadTestConfig.validate in its own words ("expected a finite number of seconds"), which tests pin
    "LoadTestConfig.burstiness": "validate: expected a finite number > 0",
    "LoadTestConfig.random_range_ratio": "validate: expected 0 <= x < 1",
    "LoadTestConfig.timeout_s": "validate: expected a finite number of seconds > 0",
    "LoadTestConfig.warmup_timeout_s": "validate: expected a finite number of seconds >= 0",
}


def _specs() -> list[type[Spec]]:
    """Every Spec class defined under the plan, bench workloads and loadtest packages, and the Recipe."""
    found: dict[str, type[Spec]] = {"Recipe": Recipe}
    for package in (accelkit.plan, accelkit.bench.workloads, accelkit.loadtest):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for obj in vars(module).values():
                if isinstance(obj, type) and issubclass(obj, Spec) and obj.__module__ == info.name:
                    found[obj.__name__] = obj
    return list(found.values())


def test_every_float_field_of_these_specs_is_finite_or_says_why_not():
    """A new float field in a plan, workload, recipe or load-test spec refuses inf (``finite=True``, or both bounds)
    unless it is listed above with the reason inf means something there."""
    unchecked, seen = [], set()
    for spec in _specs():
        hints = typing.get_type_hints(spec)
        for f in dataclasses.fields(spec):  # type: ignore[arg-type]
            if hints[f.name] not in (float, float | None):
                continue
            name = f"{spec.__name__}.{f.name}"
            seen.add(name)
            bounded = f.metadata.get("min") is not None and f.metadata.get("max") is not None
            if not (f.metadata.get("finite") or bounded or name in TAKES_INF):
                unchecked.append(name)
    assert unchecked == []
    assert set(TAKES_INF) <= seen  # the list names real fields
    assert {"PlanOptions.target_tokens_per_s", "LLMTrainConfig.lr", "SLO.ttft_ms",
            "Recipe.powersgd_min_compression_rate"} <= seen  # the walk found the specs
