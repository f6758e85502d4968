"""`tune llm` keeps both steps the bench measures per recipe (prefill, decode) and says which one it ranks.

Its trials were built from ``{entry["name"]: entry}`` over the run's entries: the last step of each recipe (decode)
overwrote the first, so every figure, the ranking and the objective read decode alone and prefill was dropped
without a word."""

from accelkit.bench.workloads import make_workload
from accelkit.cli.output import out
from accelkit.cli.tune import tune_table
from accelkit.timing import LoopConfig
from accelkit.tune import tune
from accelkit.tune.search import TuneConfig


def test_tune_llm_keeps_prefill_and_decode_and_names_the_ranked_step():
    workload = make_workload("llm", {"model": "tiny-llama", "prompt_len": 16, "output_len": 4})
    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0.0, min_iterations=2, min_time_s=0.0)
    result = tune(workload, TuneConfig(device="cpu", compile=False, max_trials=2, loop=loop), store=None)
    doc = result.to_json()
    assert doc["ranked_step"] == "decode"
    measured = [t for t in doc["trials"] if t["status"] == "measured"]
    assert [t["name"] for t in measured] == ["fp32", "bf16"]
    for t in measured:
        prefill, decode = t["steps"]
        assert (prefill["step"], decode["step"], t["step"]) == ("prefill", "decode", "decode")
        assert t["throughput"] == decode["throughput"] and t["latency_s"] == decode["latency_s"]
        assert t["vs_baseline"] == decode["vs_baseline"]
        assert prefill["throughput"] > 0 and prefill["throughput"] != decode["throughput"]
        if t["memory_basis"] == "measured peak":  # the recipe's peak: the higher of its steps'
            assert t["memory_bytes"] == max(s["memory_bytes"] for s in t["steps"])
    assert any(n.startswith("each recipe measures prefill, decode: speed and latency are ranked on the decode step")
               for n in result.notes), result.notes
    with out.capture() as captured:
        out.print(tune_table(result))
    assert "objective: throughput, decode step (cpu)" in captured.get()
