"""The CNN recipes the docs promise are tried: channels_last for a training CNN (resnet), channels_last + Conv-BN
folding for a CNN in inference — a `custom` model with an nn.Conv2d included (``Custom.is_cnn`` was always False,
and resnet, a training workload, returned its candidates before the CNN branch). And `--objective memory` on a CPU
is refused where the planner has no estimate (a custom model has none): RSS peaks there depend on measuring order."""

from __future__ import annotations

from accelkit.bench.workloads import make_workload
from accelkit.tune import candidate_recipes, tune
from accelkit.tune.search import QUICK_LOOP, TuneConfig

CNN = """import torch
from torch import nn
def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    return model.eval(), torch.randn(4, 3, 16, 16)
def mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 8)), torch.randn(2, 8)
"""


def _module(tmp_path, monkeypatch, name: str) -> str:
    (tmp_path / f"{name}.py").write_text(CNN)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _cnn_names(workload) -> list[str]:
    return [n for n, _ in candidate_recipes(workload, compile=False) if "channels_last" in n or "fold_bn" in n]


def test_cnn_candidates_for_resnet_training_and_a_custom_cnn(tmp_path, monkeypatch):
    assert _cnn_names(make_workload("resnet", {"size": "tiny"})) == ["bf16+channels_last", "channels_last"]
    module = _module(tmp_path, monkeypatch, "tune_cnn_candidates")
    cnn, mlp = (make_workload("custom", {"module": f"{module}:{f}"}) for f in ("make", "mlp"))
    assert cnn.is_cnn and not mlp.is_cnn
    assert _cnn_names(cnn) == ["bf16+channels_last+fold_bn", "channels_last+fold_bn"] and _cnn_names(mlp) == []


def test_a_custom_cnn_measures_its_channels_last_and_folded_recipes(tmp_path, monkeypatch):
    workload = make_workload("custom", {"module": f"{_module(tmp_path, monkeypatch, 'tune_cnn_measured')}:make"})
    loop = QUICK_LOOP.replace(warmup_iterations=1, warmup_time_s=0.0, min_iterations=2, min_time_s=0.0)
    result = tune(workload, TuneConfig(device="cpu", compile=False, max_trials=3, loop=loop), store=None)
    trials = {t.name: t for t in result.trials}
    for name in ("bf16+channels_last+fold_bn", "channels_last+fold_bn"):
        assert trials[name].status == "measured" and trials[name].passed, (name, trials[name].reason)
    assert trials["channels_last+fold_bn"].gate["candidate_value"] > 0.999  # folding keeps the fp32 output


def test_objective_memory_is_refused_on_a_cpu_for_a_model_the_planner_does_not_model(tmp_path, monkeypatch, cli):
    module = _module(tmp_path, monkeypatch, "tune_cnn_memory")
    proc = cli("tune", "--module", f"{module}:make", "--objective", "memory", "--device", "cpu", "--no-save",
               "--no-progress")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: --objective memory on a CPU ranks the planner's memory estimates, and it has none "
                           "for fp32, ") and line.endswith("use --objective throughput or latency, or tune on a GPU")
