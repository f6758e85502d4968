"""The bench's drift figures for BERT: its output is a hidden state (``output_is_logits = False``), so no top-1
agreement is computed over hidden features — the JSON showed one while tune's gate already ignored it."""

from __future__ import annotations


def test_bench_bert_reports_no_top1_over_hidden_features():
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0.0, min_iterations=2, min_time_s=0.0)
    run = run_benchmark(make_workload("bert", {"size": "tiny", "batch_size": 2, "seq_len": 16}),
                        [Variant(), Variant(precision="bf16")],
                        BenchConfig(device="cpu", save=False, auto_probe=False, predict=False, loop=loop))
    bf16 = next(v for v in run.variants if v.name == "bf16")
    assert bf16.accuracy is not None and bf16.accuracy.cosine is not None and bf16.accuracy.cosine > 0.99
    assert bf16.accuracy.top1_agreement is None
