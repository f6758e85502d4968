"""`accelkit plan` flags are generated from its specs (issue 16 item 3): every flag the command had before
generation still exists, and each spec-backed one has its field's default and bounds."""

import typer

from accelkit.cli.app import app
from accelkit.plan import PlanOptions
from accelkit.plan.diffusion import ImageRequest
from accelkit.plan.layout import MAX_DEVICES
from accelkit.plan.request import LayoutChoice, PlanRequest
from tests.conftest import main_in_process

FLAGS_BEFORE = ["--model", "--task", "--hardware", "--num-devices", "--tp", "--pp", "--dp", "--ep", "--zero",
                "--recompute", "--sequence-parallel", "--micro-batch", "--global-batch", "--seq-len", "--precision",
                "--optimizer", "--offload", "--batch", "--prompt-len", "--output-len", "--kv-dtype", "--compare", "--top",
                "--price-per-device-hour", "--activity-factor", "--target-tokens-per-s", "--json"]


def _plan_command():
    root = typer.main.get_command(app)
    return root.commands["plan"]


def test_plan_binds_its_four_specs():
    fn = _plan_command().callback
    while not hasattr(fn, "spec_options"):
        fn = fn.__wrapped__
    assert {spec for spec, _ in fn.spec_options} == {PlanRequest, LayoutChoice, PlanOptions, ImageRequest}


def test_every_former_flag_survives_generation():
    opts = {o for p in _plan_command().params for o in p.opts}
    assert set(FLAGS_BEFORE) <= opts
    assert {"--cp", "--vp", "--attention", "--kernels", "--tp-comm-overlap"} <= opts


def test_num_devices_is_bounded_like_the_planner():
    param = next(p for p in _plan_command().params if "--num-devices" in p.opts)
    assert (param.min, param.max) == (1, MAX_DEVICES)


def _plan_exit(capsys, *args: str) -> tuple[int, str]:
    import pytest

    from accelkit.cli.app import main

    with pytest.raises(SystemExit) as info:
        main(["plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "8", *args])
    return info.value.code, capsys.readouterr().err


def test_infer_refuses_training_only_request_flags(capsys):
    # before: --optimizer sgd, --offload and --grad-compression bf16 under --task infer gave byte-identical plans
    for flags, named in ((["--optimizer", "sgd"], "--optimizer sgd"), (["--optimizer", "adam"], "--optimizer adam"),
                         (["--offload"], "--offload"), (["--no-offload"], "--no-offload"),
                         (["--grad-compression", "bf16"], "--grad-compression bf16")):
        code, err = _plan_exit(capsys, "--task", "infer", *flags)
        assert code == 2, err
        assert err.strip().splitlines() == [f"error: {named} applies to --task train; inference does not model it "
                                            "— drop it"]


def test_the_library_refuses_what_the_cli_refuses_for_inference(capsys):
    # before: plan(), search() and compare() planned Workload(task="infer", optimizer="sgd") — or recipe.offload, or a
    # gradient compression — exactly as without it, while `accelkit plan --task infer` refused the same settings
    from functools import partial

    import pytest

    from accelkit.core import Cluster, Recipe, Workload
    from accelkit.hardware import get_device
    from accelkit.models import get_preset
    from accelkit.plan import compare, plan, search

    one = Cluster(device=get_device("h100"), num_devices=1)
    model = get_preset("tiny-llama")
    for flags, setting in ((["--optimizer", "sgd"], {"optimizer": "sgd"}),
                           (["--offload"], {"recipe": Recipe(precision="bf16", offload=True)}),
                           (["--grad-compression", "powersgd"], {"recipe": Recipe(grad_compression="powersgd")})):
        code, err = _plan_exit(capsys, "--task", "infer", *flags)
        assert code == 2 and err.startswith("error: "), err
        for task in ("infer", "serve"):
            w = Workload(model=model, task=task, **setting)
            for call in (partial(plan, w, one), partial(search, w, one), partial(compare, w, ["h100"])):
                with pytest.raises(ValueError) as info:
                    call()
                assert str(info.value) == err.strip().removeprefix("error: ")  # the same words as the CLI
        plan(Workload(model=model, task="train", **setting), one)  # training reads it
    plan(Workload(model=model, task="infer", recipe=Recipe(precision="bf16")), one)  # defaults: nothing to refuse


def test_training_still_reads_the_training_request_flags(capsys):
    import json

    from accelkit.cli.app import main

    docs = {}
    for optimizer in ("adam", "sgd"):
        main(["plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "8", "--dp", "8", "--zero", "0",
              "--micro-batch", "1", "--recompute", "full", "--optimizer", optimizer, "--json"])
        docs[optimizer] = json.loads(capsys.readouterr().out)
    adam, sgd = (docs[k]["memory_per_device_bytes"]["optimizer"] for k in ("adam", "sgd"))
    assert sgd / adam == 8 / 12  # momentum + fp32 master vs Adam's m, v + master


def test_hardware_and_compare_together_are_refused(capsys):
    # before: --hardware b200 --compare h100 printed the h100 row only, b200 silently dropped
    code, err = _plan_exit(capsys, "--compare", "h100", "--task", "infer")  # _plan_exit gives --hardware h100
    assert code == 2
    assert err.strip().splitlines() == ["error: --hardware h100 and --compare h100 are exclusive (one plan, or one row "
                                        "per hardware); drop --hardware, or add h100 to the --compare list"]


def test_inference_context_past_the_model_gets_the_training_note(capsys):
    # before: training's --seq-len past the model's positions was noted, an inference prompt was not
    from accelkit.cli.app import main

    base = ["plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "8", "--task", "infer", "--json"]
    main([*base, "--prompt-len", "131000", "--output-len", "72"])  # 131072: exactly the context
    assert "note:" not in capsys.readouterr().err
    main([*base, "--prompt-len", "500000"])
    assert "note: --prompt-len 500000 + --output-len 128 = 500128 tokens exceeds llama-3.1-8b's context of 131072" \
        in capsys.readouterr().err


def test_train_refuses_inference_only_flags(capsys):
    # before: --batch, --prompt-len, --output-len, --kv-dtype and the inference search options under --task train
    # (the default) were accepted and changed nothing in the training plan; the KV-capacity flags are inference's too
    for flags, named in ((["--prompt-len", "1000"], "--prompt-len 1000"), (["--output-len", "0"], "--output-len 0"),
                         (["--kv-dtype", "fp8"], "--kv-dtype fp8"), (["--kv-dtype", "auto"], "--kv-dtype auto"),
                         (["--max-serving-batch", "4"], "--max-serving-batch 4"),
                         (["--prefill-chunk-tokens", "100"], "--prefill-chunk-tokens 100"),
                         (["--max-decode-latency-s", "0.1"], "--max-decode-latency-s 0.1"),
                         (["--kv-cache-memory", "2GiB"], "--kv-cache-memory 2147483648"),
                         (["--gpu-memory-utilization", "0.5"], "--gpu-memory-utilization 0.5"),
                         (["--block-size", "32"], "--block-size 32"),
                         (["--kv-cache-scales", "per-tensor"], "--kv-cache-scales per-tensor"),
                         (["--inflight-batching"], "--inflight-batching")):
        for task in ([], ["--task", "train"]):
            code, err = _plan_exit(capsys, *task, *flags)
            assert code == 2, err
            assert err.strip().splitlines() == [f"error: {named} applies to --task infer; training does not model it "
                                                "— drop it, or add --task infer"]
    code, err = _plan_exit(capsys, "--batch", "8")
    assert code == 2
    assert err.strip().splitlines() == ["error: --batch 8 applies to --task infer (concurrent sequences per replica); "
                                        "for training give --global-batch (sequences per step)"]


def test_inference_still_reads_the_inference_flags(capsys):
    import json

    from accelkit.cli.app import main

    main(["plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "1", "--task", "infer",
          "--batch", "4", "--prompt-len", "1000", "--output-len", "64", "--kv-dtype", "fp8", "--max-serving-batch", "8",
          "--prefill-chunk-tokens", "2048", "--max-decode-latency-s", "1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (doc["batch"], doc["prompt_len"], doc["output_len"], doc["kv_cache_dtype"]) == (4, 1000, 64, "fp8")
    assert any("prefill in chunks of 2048 tokens" in a for a in doc["assumptions"])


def test_infer_refuses_decoder_lengths_for_models_without_a_decoder(capsys):
    """--prompt-len and --output-len changed nothing for an encoder, a ViT or a CNN (bert-base gave the same plan at
    64, 128 and 256 prompt tokens: its input length is --seq-len)."""
    import pytest

    from accelkit.cli.app import main

    for model, flag, takes in (("bert-base", ["--prompt-len", "128"], "an encoder model and takes its input length "
                                                                       "from --seq-len"),
                               ("vit-b16", ["--output-len", "0"], "an encoder model and takes a fixed number of patches"),
                               ("resnet-50", ["--prompt-len", "4"], "a CNN and takes one image per batch element")):
        with pytest.raises(SystemExit) as info:
            main(["plan", "--model", model, "--hardware", "h100", "--task", "infer", "--batch", "4", *flag])
        assert info.value.code == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"error: {' '.join(flag)} applies to decoder models (a prompt, then generated tokens); {model} is {takes} "
            "— drop it"]


def test_bench_bert_is_predicted_at_its_own_sequence_length():
    """The bench's prediction for `bench bert --seq-len 128` was planned at the Workload default seq_len 2048
    (only prompt_len was set), 16× the tokens: "6.72× faster than the planner expects"."""
    import pytest

    from accelkit.bench.predict import predict_variant
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.core import Cluster, Workload
    from accelkit.models import resolve_model
    from accelkit.plan import plan, resolve_hardware

    bench = make_workload("bert", {"size": "base", "batch_size": 4, "seq_len": 128})
    estimate, why = predict_variant(bench, Variant(), "cuda", "h100")
    assert estimate is not None, why
    direct = plan(Workload(model=resolve_model("bert-base"), task="infer", batch_size=4, seq_len=128),
                  Cluster(device=resolve_hardware("h100"), num_devices=1))
    assert estimate.workload.seq_len == 128
    assert estimate.details["flops_per_step"] == pytest.approx(direct.details["flops_per_step"], rel=1e-9)


def _main(capsys, *args: str) -> tuple[int, str, str]:
    """`accelkit plan ARGS` in process: (exit code, stdout, stderr)."""
    return main_in_process(capsys, "plan", *args)


def test_compare_with_top_is_refused(capsys):
    # before: --compare h100,b200 --top 3 printed one row per hardware, --top silently dropped
    code, _, err = _main(capsys, "--model", "llama-3.1-8b", "--compare", "h100,b200", "--top", "3")
    assert code == 2
    assert err.strip().splitlines() == ["error: --top 3 lists one hardware's best layouts; --compare shows each "
                                        "hardware's best one — drop --top, or plan one --hardware at a time"]


def test_learned_positions_past_their_table_are_refused(capsys):
    # before: gpt3-175b (2,048 learned positions) was planned at --seq-len 4096 with a note; no such position exists
    code, _, err = _main(capsys, "--model", "gpt3-175b", "--hardware", "h100", "--num-devices", "64", "--seq-len", "4096")
    assert code == 2 and err.strip().splitlines() == [
        "error: --seq-len 4096 exceeds the 2048 learned positions of gpt3-175b (its position-embedding table has 2048 "
        "rows); use --seq-len 2048 or less"]
    code, _, err = _main(capsys, "--model", "gpt3-175b", "--hardware", "h100", "--num-devices", "8", "--task", "infer",
                         "--prompt-len", "2000", "--output-len", "100")
    assert code == 2 and "= 2100 tokens exceeds the 2048 learned positions of gpt3-175b" in err
    # rotary positions extrapolate: a note, as before
    code, _, err = _main(capsys, "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "8", "--seq-len",
                         "262144", "--cp", "8", "--json")
    assert code == 0 and "note: --seq-len 262144 exceeds llama-3.1-8b's context of 131072" in err


def test_offload_shows_host_memory_per_rank_and_states_what_it_does_not_model(capsys):
    # before: host memory was only in --json, and neither the 25 GB/s PCIe copy nor the unmodelled CPU Adam step was
    # in the assumptions
    code, out, _ = _main(capsys, "--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "8", "--seq-len",
                         "4096", "--global-batch", "64", "--dp", "8", "--zero", "3", "--offload", "--micro-batch", "1",
                         "--recompute", "full")
    assert code == 0
    assert "host memory / rank │ optimizer 98.56 GiB" in out  # 70.55 B / 8 ranks × 12 B
    assert "over PCIe at 25 GB/s per device and direction" in out and "the CPU Adam step itself is NOT modelled" in out


def test_inference_prefill_is_labelled_as_the_whole_batchs(capsys):
    # before: "prefill (TTFT)" showed the prefill of all `batch` prompts, not one request's time to first token
    code, out, _ = _main(capsys, "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "1", "--task",
                         "infer", "--batch", "4", "--prompt-len", "1024")
    assert code == 0 and "TTFT)" not in out
    assert "for the whole batch (4 × 1024 tokens: a request's TTFT when all arrive at once)" in out


def test_an_unreachable_target_prints_a_warning_line(capsys):
    code, _, err = _main(capsys, "--model", "llama-3.1-8b", "--hardware", "h100", "--max-devices", "16",
                         "--target-tokens-per-s", "1e12", "--json")
    assert code == 0
    assert [ln for ln in err.splitlines() if ln.startswith("warning:")] == [
        "warning: no device count up to --max-devices 16 reaches --target-tokens-per-s 1,000,000,000,000; showing the "
        "best layout on 16"]
