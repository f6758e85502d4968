"""`accelkit tune` on a CPU with no stored probe measures this CPU once: its quick probe takes the matmul dtype of
every recipe it will measure (fp16 for the fp16 recipe) beside `hw probe`'s own, so the bench inside finds every MFU
peak stored. It probed fp32 and bf16 only, and the bench then ran a second quick probe for fp16 that measured the
copy bandwidth and the kernel probes again (a tiny BERT tune probed for 17 s on a 2-core VM, 12 s with one probe)."""

from __future__ import annotations

import pytest

from accelkit.bench.runner import Reporter
from accelkit.bench.workloads import make_workload
from accelkit.results import ResultStore
from accelkit.tune import tune
from accelkit.tune.search import QUICK_LOOP, Trial, TuneConfig, _refuse, candidate_recipes, probe_dtypes


class _Notes(Reporter):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


def _bert():
    return make_workload("bert", {"size": "tiny", "batch_size": 2, "seq_len": 16})


@pytest.mark.parametrize(("max_trials", "dtypes"), [
    (2, ("fp32", "bf16")),  # fp32, bf16: nothing beyond `hw probe`'s own (no fp16 probed for nothing)
    (4, ("fp32", "bf16", "fp16")),  # … int8-dynamic (no int8 matmul peak on a CPU: not probed), fp16
    (8, ("fp32", "bf16", "fp16")),  # … and the weight-only recipes, which compute in fp32
])
def test_the_probe_takes_the_mfu_dtypes_of_the_recipes_that_will_be_measured(max_trials, dtypes):
    workload = _bert()
    trials = [Trial(name, recipe) for name, recipe in candidate_recipes(workload, compile=False)]
    _refuse(trials, workload, "cpu", lambda text: None)  # fp8-dynamic and tf32: refused, not counted in the trials
    assert probe_dtypes(trials, TuneConfig(max_trials=max_trials), "cpu") == dtypes


def test_a_tune_probes_this_cpu_once():
    reporter, steps = _Notes(), []
    with ResultStore() as store:
        result = tune(_bert(), TuneConfig(max_trials=4, compile=False, device="cpu",
                                          loop=QUICK_LOOP.replace(warmup_time_s=0.1, min_time_s=0.1)),
                      store=store, reporter=reporter, on_step=steps.append)
        probes = store.query(kind="probe")
        rows = {t.name: [store.get(i).result.details for i in t.result_ids] for t in result.trials if t.result_ids}
    assert result.ran_quick_probe and result.quick_probe_id is not None
    assert [p.id for p in probes] == [result.quick_probe_id]  # one probe row: tune's
    assert set(probes[0].result.details["matmul"]) == {"fp32", "bf16", "fp16"}
    assert sum(s.startswith("no stored probe of this CPU") for s in steps) == 1
    assert not [n for n in reporter.notes if "hw probe" in n], reporter.notes  # the bench ran none of its own
    assert [t.name for t in result.trials if t.status == "measured"] == ["fp32", "bf16", "int8-dynamic", "fp16"]
    # what MFU divides by is still each recipe's own dtype's peak, from that one probe
    for name, dtype in (("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp16")):
        (details,) = rows[name]
        source = details["mfu"]["peak_source"]
        assert f"result {result.quick_probe_id} " in source and f"{dtype} matmul" in source, (name, source)
