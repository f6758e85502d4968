"""Issue 13: the fp32 reference costs no more memory than the variants. The whole `accelkit bench` command's
peak RSS stays within 1.2× the peak of its largest variant run on its own; the shape is one where the old
reference (a full-batch fp32 output kept beside every variant, plus a full fp32 step to count FLOPs) went over
that bound. And the reference pass never changes what a variant measures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

# logits-dominated: a wide vocabulary on a tiny decoder, so activation memory is mostly (batch, seq, vocab) tensors
SHAPE = {"batch_size": 16, "seq_len": 256}
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 32000,
          "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}

VARIANT_ALONE = """
import json, sys
import accelkit.cli.app  # the imports the CLI makes, so the baseline is the same
from accelkit.bench.variants import Variant
from accelkit.bench.workloads import make_workload
cfg, precision = json.loads(sys.argv[1]), sys.argv[2]
prepared = make_workload("llm-train", cfg).prepare(Variant(precision=precision), "cpu", seed=0)
for _ in range(2):  # the second step is the peak (AdamW's state, made by the first, beside the activations and
    prepared.steps[0].fn()  # gradients); a third measured 0 KiB more (2,101,504 KiB after steps 2 and 3, 2-core VM)
"""


def peak_rss_mib(args: list[str], tmp_path) -> tuple[float, str]:
    """Run a Python subprocess; return its own peak RSS (wait4's rusage covers this child only) and its stdout."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:  # files, not pipes: wait4 reaps the child itself
        proc = subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err.read_text()[-3000:]
    return usage.ru_maxrss / 1024, out.read_text()


@pytest.fixture(scope="module")
def model_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("wide-vocab") / "config.json"
    path.write_text(json.dumps(CONFIG))
    return str(path)


def test_whole_command_stays_within_1_2x_of_its_largest_variant(model_config, _isolated_home, tmp_path):
    cfg = {"model": model_config, **SHAPE}
    alone, _ = peak_rss_mib(["-c", VARIANT_ALONE, json.dumps(cfg), "bf16"], tmp_path)
    whole, stdout = peak_rss_mib([
        "-m", "accelkit", "bench", "llm-train", "--model", model_config, "--batch-size", str(SHAPE["batch_size"]),
        "--seq-len", str(SHAPE["seq_len"]), "--precision", "bf16", "--device", "cpu", "--warmup", "0",
        "--warmup-time", "0", "--min-iterations", "2", "--min-time", "0", "--no-probe", "--no-save", "--json"], tmp_path)
    doc = json.loads(stdout)
    (entry,) = doc["variants"]
    assert entry["accuracy"]["rows"] == 2 and entry["accuracy"]["cosine"] > 0.99  # drift was computed (on 2 rows)
    assert entry["mfu"]["flops_per_item"] > 0 and "meta device" in entry["mfu"]["flops_source"]
    assert whole <= 1.2 * alone, f"whole command {whole:.0f} MiB vs the bf16 variant alone {alone:.0f} MiB"
