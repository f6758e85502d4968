"""`accelkit plan` flags that changed nothing for the task or model asked for — planned as if not given — are one
error line (exit 2) instead; a pinned device count that misses --target-tokens-per-s says so; the --tp values an
error offers pass every tensor-parallel rule; a refused command prints its one error line with no note before it."""

from __future__ import annotations

import json

import pytest

from accelkit.core import Cluster, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import resolve_model
from accelkit.plan import PlanOptions, search
from accelkit.plan.layout import check_user_layout
from tests.conftest import main_in_process

_INFER = ["plan", "--model", "llama-3.1-8b", "--task", "infer", "--hardware", "h100", "--num-devices", "1"]


def _error(capsys, *argv: str) -> str:
    code, out, err = main_in_process(capsys, *argv)
    assert code == 2 and out == "" and "Traceback" not in err, (code, out, err)
    (line,) = err.strip().splitlines()
    return line


@pytest.mark.parametrize("argv,message", [
    # before: a decoder's inference planned 512-token prompts whatever --seq-len said
    ([*_INFER, "--seq-len", "32768"],
     "error: --seq-len 32768 is the training sequence length; llama-3.1-8b's inference takes --prompt-len and "
     "--output-len (prompt and generated tokens per sequence) — use those"),
    # before: a ViT's plan was the same at any --seq-len (its sequence is its patches)
    (["plan", "--model", "vit-b16", "--hardware", "h100", "--seq-len", "100"],
     "error: --seq-len 100 does not apply to vit-b16: a ViT's sequence is its 196 patches and the class token (197) — "
     "drop it"),
    # before: a CNN's default global batch became 4 Mi ÷ --seq-len images (32,768 at --seq-len 100)
    (["plan", "--model", "resnet-50", "--hardware", "h100", "--seq-len", "100"],
     "error: --seq-len 100 applies to transformers; resnet-50 is a CNN (one image per batch element) — drop it"),
])
def test_seq_len_where_the_model_takes_none_is_refused(capsys, argv, message):
    assert _error(capsys, *argv) == message


@pytest.mark.parametrize("flag", [["--optimizer-states", "bf16"], ["--frozen-weights"], ["--selective-recompute", "op"],
                                  ["--grad-reduce-fp32"], ["--no-grad-reduce-overlap"],
                                  ["--fsdp-backward-prefetch", "post"], ["--autocast-fp32-params"], ["--dropout"],
                                  ["--no-dropout"], ["--fused-loss"], ["--tp-comm-overlap"], ["--tp-backward-overlap"],
                                  ["--pp-scatter-gather"]])
def test_inference_refuses_training_only_options(capsys, flag):
    # before: each planned exactly what the plan without it did (the inference model reads none of them)
    assert _error(capsys, *_INFER, *flag) == f"error: {' '.join(flag)} applies to --task train; inference does not " \
                                             "model it — drop it"


def test_inference_keeps_the_options_it_reads(capsys):
    code, out, _ = main_in_process(capsys, *_INFER, "--batch", "4", "--attention", "math", "--overhead", "4GiB",
                                   "--json")
    assert code == 0 and json.loads(out)["memory_per_device_bytes"]["other"] == 4 * 2**30


@pytest.mark.parametrize("model,flag,shown,what", [
    ("bert-base", ["--kv-dtype", "fp8"], "--kv-dtype fp8", "an encoder model"),
    ("bert-base", ["--kv-cache-memory", "1GiB"], "--kv-cache-memory 1.00 GiB", "an encoder model"),
    ("vit-b16", ["--block-size", "32"], "--block-size 32", "an encoder model"),
    ("resnet-50", ["--inflight-batching"], "--inflight-batching", "a CNN"),
    ("resnet-50", ["--gpu-memory-utilization", "0.5"], "--gpu-memory-utilization 0.5", "a CNN"),
])
def test_kv_flags_for_a_model_without_a_kv_cache_are_refused(capsys, model, flag, shown, what):
    # before: bert-base planned the same with or without each (no KV cache, no decode step)
    line = _error(capsys, "plan", "--model", model, "--task", "infer", "--hardware", "h100", *flag)
    assert line == f"error: {shown} applies to a decoder's KV cache and decode steps; {model} is {what} and has " \
                   "neither — drop it"


def test_kv_cache_scales_without_a_scaled_cache_is_refused(capsys):
    # before: --kv-cache-scales per-tensor with --kv-dtype auto (bf16, no scales) planned the same as without it
    assert _error(capsys, *_INFER, "--kv-cache-scales", "per-tensor") == (
        "error: --kv-cache-scales per-tensor says where an fp8 or int8 KV cache keeps its scales; --kv-dtype auto "
        "keeps the model dtype, with none — add --kv-dtype fp8 (or int8), or drop it")


def test_a_refusal_is_one_line_with_no_context_note_before_it(capsys):
    # before: "note: --seq-len 2048 exceeds tiny-mixtral's context of 1024" came first, then the error line
    assert _error(capsys, "plan", "--model", "tiny-mixtral", "--hardware", "tpu-v5p", "--precision", "fp16",
                  "--seq-len", "2048").startswith("error: TPU-v5p has no fp16 peak")
    code, _, err = main_in_process(capsys, "plan", "--model", "tiny-mixtral", "--hardware", "h100", "--num-devices", "1",
                                   "--seq-len", "2048", "--global-batch", "1", "--json")
    assert code == 0 and err.strip() == "note: --seq-len 2048 exceeds tiny-mixtral's context of 1024"


@pytest.mark.parametrize("train", [True, False])
def test_the_tp_values_offered_pass_the_kv_head_rule(train):
    # before: Qwen2.5 7B (28 heads, 4 KV heads) --tp 8 offered "1, 2, 4, 7", and --tp 7 was refused for its KV heads
    model = resolve_model("qwen2.5-7b")
    cluster = Cluster(device=get_device("h100"), num_devices=8)
    with pytest.raises(UserError, match=r"does not divide the 28 attention heads of qwen2\.5-7b; use one of 1, 2, 4$"):
        check_user_layout(model, cluster, {"tp": 8}, 8, train=train)
    for tp in (1, 2, 4):
        check_user_layout(model, cluster, {"tp": tp}, tp, train=train)


def test_a_pinned_count_that_misses_the_target_warns():
    # before: --num-devices 8 --target-tokens-per-s 1e6 gave a plan at 74,000 tokens/s and no word of the target
    workload = Workload(model=resolve_model("llama-3.1-8b"), task="train", seq_len=4096)
    cluster = Cluster(device=get_device("h100"), num_devices=8)
    best = search(workload, cluster, options=PlanOptions(target_tokens_per_s=1e6), top=1)[0]
    (warning,) = best.extra["context"].warnings
    assert warning == (f"the best layout on 8 × H100-SXM5-80GB reaches {best.tokens_per_s:,.0f} tokens/s, short of "
                       "--target-tokens-per-s 1,000,000")
    met = search(workload, cluster, options=PlanOptions(target_tokens_per_s=best.tokens_per_s), top=1)[0]
    assert met.extra["context"].warnings == []
