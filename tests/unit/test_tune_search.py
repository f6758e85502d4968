from accelkit.core import Recipe
from accelkit.tune.search import Trial, _dominates, _gate, _objective_key, snippet


def _trial(name, tput, mem, agreement):
    t = Trial(name, Recipe())
    t.throughput, t.memory_bytes, t.gate, t.passed = tput, mem, {"candidate_value": agreement, "passed": True}, True
    return t


def test_gate_uses_top1_for_logits_and_cosine_otherwise():
    assert _gate({"cosine": 0.999, "top1_agreement": 0.995, "identical": False}, 0.01)["passed"]
    g = _gate({"cosine": 0.9999, "top1_agreement": 0.98, "identical": False}, 0.01)
    assert not g["passed"] and g["criterion"] == "top1" and g["threshold"] == 0.99
    assert _gate({"cosine": 0.995, "top1_agreement": None, "identical": False}, 0.01)["criterion"] == "cosine"
    assert not _gate({"cosine": 0.98, "top1_agreement": None, "identical": False}, 0.01)["passed"]
    assert not _gate(None, 0.01)["passed"]


def test_pareto_dominance():
    fast = _trial("fast", 100, 50, 0.999)
    slow_lean = _trial("slow_lean", 50, 10, 0.999)
    worse = _trial("worse", 90, 60, 0.995)
    assert _dominates(fast, worse) and not _dominates(fast, slow_lean) and not _dominates(slow_lean, fast)
    assert not _dominates(fast, fast)


def test_objective_keys():
    a, b = _trial("a", 100, 50, 1.0), _trial("b", 80, 20, 1.0)
    a.latency_s, b.latency_s = 0.01, 0.02
    assert min([a, b], key=lambda t: _objective_key(t, "throughput")) is a
    assert min([a, b], key=lambda t: _objective_key(t, "latency")) is a
    assert min([a, b], key=lambda t: _objective_key(t, "memory")) is b


def test_snippet_is_runnable_python():
    code = snippet(Recipe(precision="bf16", compile="default"))
    assert "Recipe(precision='bf16', compile='default')" in code
    namespace: dict = {"model": None}
    try:
        exec(code.replace("model = apply(model, ", "recipe = ("), namespace)
    except Exception as exc:  # pragma: no cover - the assertion below explains
        raise AssertionError(code) from exc
    assert namespace["recipe"] == Recipe(precision="bf16", compile="default")


def test_the_int4_candidate_runs_on_a_bf16_model_on_cuda():
    """tinygemm (int4 weights on CUDA) packs bf16 weights only: an fp32 int4 trial would always be refused there."""
    from accelkit.bench.workloads import make_workload
    from accelkit.tune.search import candidate_recipes

    workload = make_workload("bert")
    int4 = {dev: [r for _, r in candidate_recipes(workload, cuda=dev == "cuda") if r.quantization == "int4-weight"]
            for dev in ("cpu", "cuda")}
    assert [r.precision for r in int4["cuda"]] == ["bf16"]
    assert [r.precision for r in int4["cpu"]] == ["fp32"]  # the CPU path quantizes fp32 weights


def test_gate_fails_an_accuracy_without_figures_with_its_note_as_the_reason():
    """An output with inf/NaN records no drift figure (cosine and top-1 null, not 0): the gate raised TypeError
    comparing None with the threshold. It fails now and says why; so does an accuracy with no reference output."""
    overflow = {"max_abs_error": None, "cosine": None, "sqnr_db": None, "identical": False, "top1_agreement": None,
                "rows": 2, "note": "the output has inf/NaN (3 of 16 values): no drift figure is finite"}
    gate = _gate(overflow, 0.01)
    assert gate["passed"] is False and gate["criterion"] == "none" and "inf/NaN" in gate["reason"]
    no_reference = {"cosine": None, "identical": None, "top1_agreement": None, "note": "no fp32 reference output (x)"}
    assert _gate(no_reference, 0.01) == {"passed": False, "criterion": "none", "reason": "no fp32 reference output (x)"}


def _paired(name, tput, ratio, p25, p75):
    t = _trial(name, tput, 10, 1.0)
    t.vs_baseline = {"baseline": "fp32", "ratio": ratio, "p25": p25, "p75": p75, "pairs": 12, "interleaved": True}
    return t


def test_speed_is_ranked_by_the_paired_ratios_the_bench_verdict_reads():
    """tune crowned int8 by total throughput (a few slow blocks of bf16 weigh in the totals) while the bench's
    verdict on the same run put int8 at 0.975× [0.957–0.991] fp32 and bf16 fastest at 1.10×."""
    from accelkit.tune.search import rank_by_paired_ratios

    base = _trial("fp32", 100, 10, 1.0)
    base.vs_baseline = {"baseline": "fp32", "ratio": 1.0, "p25": None, "p75": None, "pairs": 0, "interleaved": None,
                        "verdict": "baseline"}
    bf16, int8 = _paired("bf16", 105, 1.10, 1.07, 1.13), _paired("int8", 112, 0.975, 0.957, 0.991)
    assert min([base, bf16, int8], key=lambda t: _objective_key(t, "throughput")) is int8  # totals alone
    note = rank_by_paired_ratios([base, bf16, int8])
    assert min([base, bf16, int8], key=lambda t: _objective_key(t, "throughput")) is bf16
    assert _dominates(bf16, int8)  # as fast by the pairs, as lean, as accurate
    assert note == ("speed ranked by the median of paired blocks against fp32 (the bench's verdict), not total "
                    "throughput: fastest bf16 1.1× [1.07–1.13], next fp32 1×")
    close = _paired("fp16", 90, 1.08, 1.02, 1.10)  # its p75 reaches bf16's p25: no clear winner
    assert rank_by_paired_ratios([base, bf16, close]).endswith(" — within the run-to-run spread of each other")


def test_trials_without_pairs_keep_total_throughput():
    from accelkit.tune.search import rank_by_paired_ratios

    a, b = _paired("a", 100, 1.2, 1.1, 1.3), _trial("b", 120, 10, 1.0)  # b: measured one after another, no pairs
    assert rank_by_paired_ratios([a, b]) is None and a.ranked_speed is None
    assert min([a, b], key=lambda t: _objective_key(t, "throughput")) is b
