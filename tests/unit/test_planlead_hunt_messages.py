"""What `accelkit plan` says, found in a hunt: a budget basis with a price of 0 blamed the price catalog; a CNN's or
an encoder's inference showed "prefill s" and an empty "decode ms/tok" (one forward pass per batch, no prefill or
decode); inference layout errors spoke of training (cp, "divides the global batch", data-parallel ranks); a compare
whose latency bound no count meets said no count "fits". In process."""

import json

import pytest

from accelkit.core import UserError
from tests.conftest import main_in_process


@pytest.mark.parametrize("price,named", [("h100=0", "H100-SXM5-80GB"), ("0", "H100-SXM5-80GB, H200-SXM-141GB")])
def test_a_budget_basis_with_a_price_of_0_names_the_price_not_the_catalog(capsys, price, named):
    code, out, err = main_in_process(capsys, "plan", "--model", "llama-3.1-8b", "--task", "infer", "--compare",
                                     "h100,h200", "--compare-basis", "budget", "--price-per-device-hour", price)
    assert code == 2 and out == ""
    assert err.startswith(f"error: --compare-basis budget cannot use a price of 0 for {named} ")
    assert "catalog" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model,what", [("resnet-50", "samples"), ("bert-base", "sequences")])
def test_one_pass_inference_shows_its_batch_time_not_prefill_and_decode(capsys, model, what):
    code, out, err = main_in_process(capsys, "plan", "--model", model, "--task", "infer", "--compare", "h100,h200",
                                     "--num-devices", "1")
    assert code == 0, err
    assert "batch s" in out and "prefill" not in out and "decode" not in out
    code, out, err = main_in_process(capsys, "plan", "--model", model, "--task", "infer", "--hardware", "h100",
                                     "--batch", "32")
    assert code == 0, err
    table, notes = out.split("assumptions:")
    assert "prefill" not in table and "decode" not in table and "no decode, no KV cache" in notes
    assert f" ms per batch of 32 {what} (one forward pass)" in out
    # a decoder keeps its prefill and decode columns
    code, out, _ = main_in_process(capsys, "plan", "--model", "tiny-llama", "--task", "infer", "--compare", "h100,h200",
                                   "--num-devices", "1")
    assert "prefill" in out and "decode" in out and "batch s" not in out


@pytest.mark.parametrize("args,message", [
    (["--model", "llama-3.1-8b", "--num-devices", "8", "--dp", "3"],
     "error: dp·tp·pp (dp replicas of tp·pp devices each) = 3 does not divide --num-devices 8; give --num-devices 9 "
     "(or another multiple of 3), or sizes whose product divides 8"),
    (["--model", "llama-3.1-8b", "--num-devices", "8", "--dp", "2", "--tp", "2", "--pp", "1"],
     "error: dp·tp·pp (dp replicas of tp·pp devices each) = 4 but --num-devices is 8; they must be equal"),
    (["--model", "mixtral-8x7b", "--num-devices", "2", "--dp", "1", "--ep", "2"],
     "dp is the replicas the devices leave, each of tp·pp devices; ep divides dp (the experts are spread over ep of "
     "the replicas) and the 8 experts — use --dp 2 or --ep 1"),
    (["--model", "resnet-50", "--tp", "2"], "error: --tp 2 is not supported for the CNN resnet-50; it runs "
                                            "data-parallel only"),
])
def test_inference_layout_errors_speak_of_inference(capsys, args, message):
    code, out, err = main_in_process(capsys, "plan", "--task", "infer", "--hardware", "h100", *args)
    assert code == 2 and out == "" and message in err, err
    assert "cp" not in err and "global batch" not in err and "trains" not in err


def test_training_keeps_its_words():
    from accelkit.core import Cluster, Recipe, Workload
    from accelkit.hardware import get_device
    from accelkit.models import get_preset
    from accelkit.plan import search

    w = Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
    with pytest.raises(UserError, match=r"^dp·tp·pp·cp = 3 does not divide --num-devices 8; give --num-devices 9 \(or another multiple of 3\), or sizes whose product divides 8$"):
        search(w, Cluster(device=get_device("h100"), num_devices=8), fixed={"dp": 3})


def test_a_compare_whose_latency_bound_no_count_meets_does_not_say_nothing_fits(capsys):
    code, out, err = main_in_process(capsys, "plan", "--model", "llama-3.1-8b", "--task", "infer", "--compare",
                                     "h100,h200", "--max-decode-latency-s", "0.0001", "--max-devices", "16", "--json")
    assert code == 0, err
    docs = json.loads(out)
    assert [d["fits"] for d in docs] == [True, True] and [d["hardware"]["num_devices"] for d in docs] == [8, 8]
    assert docs[0]["compare_basis"] == ("no device count up to --max-devices 16 decodes within --max-decode-latency-s "
                                        "0.0001 on any compared hardware (see warnings)")


@pytest.mark.parametrize("task,extra,message", [
    ("infer", [], "error: dp·tp·pp = 24 devices is above --max-devices 16; raise --max-devices to 24 or more, or pin "
                  "smaller values"),
    ("train", ["--cp", "2"], "error: dp·tp·pp·cp = 48 devices is above --max-devices 16; raise --max-devices to 48 or "
                             "more, or pin smaller values"),
])
def test_a_pinned_layout_above_max_devices_names_its_count(capsys, task, extra, message):
    # before: "no device count up to --max-devices 16 can hold the layout fields given (--dp 3, --tp 8, --pp 1)"
    code, out, err = main_in_process(capsys, "plan", "--model", "llama-3.1-8b", "--task", task, "--hardware", "h100",
                                     "--dp", "3", "--tp", "8", "--pp", "1", "--max-devices", "16", *extra)
    assert (code, out, err.strip()) == (2, "", message)


def test_a_compare_where_one_device_misses_the_latency_bound_says_so(capsys):
    # H200 decodes Llama 3.1 8B in 2.18 ms/token at tp 8, H100 in 2.41 at best: a 2.3 ms bound is out of H100's reach.
    # Before, the basis said H100 "fits at no count", though it fits on one GPU
    code, out, err = main_in_process(capsys, "plan", "--model", "llama-3.1-8b", "--task", "infer", "--compare",
                                     "h100,h200", "--max-decode-latency-s", "0.0023", "--max-devices", "16", "--json")
    assert code == 0, err
    docs = json.loads(out)
    assert [d["fits"] for d in docs] == [True, True]
    assert ("every compared hardware but H100-SXM5-80GB fits and decodes within --max-decode-latency-s 0.0023 (it "
            "does at no count up to --max-devices: see warnings)") in docs[0]["compare_basis"]
