"""A --max-decode-latency-s no device count meets is planned on the smallest count that reaches the best latency
there is, with one warning naming it. Before, the search fell back to the largest count with a layout: Llama 3.1 70B
at 2 ms/token was planned on 65,536 H100s (dp 8192 × tp 8), although more replicas never lower a replica's decode
time and tp 8 on 8 GPUs decodes as fast (found in a hunt). In process."""

import json

from accelkit.core import Cluster, Recipe, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import PlanOptions, search
from tests.conftest import main_in_process

W = Workload(model=get_preset("llama-3.1-8b"), task="infer", prompt_len=512, output_len=128,
             recipe=Recipe(precision="bf16"))
H100 = Cluster(device=get_device("h100"), num_devices=1)


def test_an_unreachable_bound_plans_the_smallest_count_with_the_best_latency():
    found = search(W, H100, options=PlanOptions(max_decode_latency_s=1e-4, max_devices=64), minimize_devices=True,
                   top=1)[0]
    # tp 8 is the fastest decode H100s have; 16, 32 or 64 of them only add replicas of it
    assert found.layout.num_devices == 8 and found.layout.tp == 8 and found.batch == 1
    ms = found.decode_time_per_token_s * 1e3
    assert found.extra["context"].warnings == [
        "--max-decode-latency-s 0.0001 is not reachable on any device count up to --max-devices 64: the fastest "
        f"decode is {ms:.3g} ms per token (tp 8 on 8 × H100-SXM5-80GB, batch 1); showing the smallest count that "
        "reaches it"]


def test_with_a_throughput_target_the_count_is_the_smallest_at_the_best_latency_that_reaches_it():
    one = search(W, H100, options=PlanOptions(max_decode_latency_s=1e-4, max_devices=64), minimize_devices=True,
                 top=1)[0]
    target = 2.5 * one.tokens_per_s  # three replicas of the fastest layout are needed: 3 × 8 (24 is on the ladder)
    found = search(W, H100, options=PlanOptions(max_decode_latency_s=1e-4, max_devices=64, target_tokens_per_s=target),
                   minimize_devices=True, top=1)[0]
    assert (found.layout.dp, found.layout.tp) == (3, 8) and found.tokens_per_s >= target
    assert found.decode_time_per_token_s == one.decode_time_per_token_s
    assert found.extra["context"].warnings[0].endswith(
        f"showing the smallest count that reaches it and --target-tokens-per-s {target:,.0f}")


def test_the_cli_prints_one_warning_and_plans_8_gpus(capsys):
    code, out, err = main_in_process(capsys, "plan", "--model", "llama-3.1-8b", "--task", "infer", "--hardware",
                                     "h100", "--max-decode-latency-s", "0.0001", "--max-devices", "64", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["hardware"]["num_devices"] == 8 and len(doc["warnings"]) == 1
    assert [ln for ln in err.splitlines() if ln.startswith("warning:")] == [f"warning: {doc['warnings'][0]}"]
