"""docs/plan.md's JSON table names every key `accelkit plan --json` emits (training with a price, with --offload,
with expert parallelism and PowerSGD; inference), nested keys included: a key added to the document without a line in
the table fails here."""

import re
from pathlib import Path

from accelkit.core import Cluster, Recipe, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, PlanOptions, plan

DOC = Path(__file__).resolve().parents[2] / "docs" / "plan.md"
H100 = get_device("h100")


def _documented() -> set[str]:
    text = DOC.read_text()
    section = text[text.index("## JSON (`--json`)"):text.index("## The model, in one screen")]
    return set(re.findall(r"`([a-z_0-9]+)`", section))


def _keys(doc: dict, prefix: str = ""):
    for key, value in doc.items():
        yield prefix + key, key
        if isinstance(value, dict) and key != "time_breakdown_s":  # its keys are in the table's text
            yield from _keys(value, prefix + key + ".")


def _plans():
    priced = PlanOptions(use_calibration=False, price_per_device_hour=3.0)
    llama8, llama70, mixtral = (get_preset(n) for n in ("llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b"))
    yield plan(Workload(model=llama8, task="train", seq_len=4096, recipe=Recipe(precision="bf16", dp=8, zero=1)),
               Cluster(device=H100, num_devices=8), priced)
    yield plan(Workload(model=llama70, task="train", seq_len=4096, recipe=Recipe(precision="bf16", dp=8, zero=3,
                                                                                 offload=True)),
               Cluster(device=H100, num_devices=8), priced)
    yield plan(Workload(model=mixtral, task="train", seq_len=4096,
                        recipe=Recipe(precision="bf16", grad_compression="powersgd")),
               Cluster(device=H100, num_devices=64), priced, layout=Layout(dp=64, tp=1, pp=1, ep=4))
    yield plan(Workload(model=llama8, task="infer", prompt_len=512, output_len=128, batch_size=8,
                       recipe=Recipe(precision="bf16")), Cluster(device=H100, num_devices=1), priced)


def test_every_json_key_is_in_the_docs_table():
    # before: tokens_counted, grad_reduction and its sub-keys, cost.price_per_device_hour were emitted but not documented
    named = _documented()
    missing = {full for est in _plans() for full, key in _keys(est.details) if key not in named}
    assert not missing, sorted(missing)
