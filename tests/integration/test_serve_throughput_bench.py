"""benchmarks/serve_throughput.py's secondary measurements of a GPU run (phase split, a profiled decode step with
graphs and eagerly), run on a CPU with a tiny model: what they return, and that one failing is recorded and
costs neither the throughput already measured nor the measurements after it."""

import importlib.util

import pytest

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import random_prompts, save_tiny_model
from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("serve_throughput", REPO / "benchmarks" / "serve_throughput.py")
serve_throughput = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve_throughput)

REQS = [{"prompt": p, "max_tokens": 4} for p in random_prompts(6, min_len=4, max_len=20, seed=5)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("bench") / "m", "tiny-llama", seed=4)


def _llm(model_dir, **kwargs):
    llm = LLM(str(model_dir), kv_cache_memory_bytes=4 << 20, max_num_seqs=8, **kwargs)
    llm.engine.runner.enable_decode_graphs(capture=False)  # the padded graph path, run eagerly
    return llm


@pytest.mark.parametrize("overlap", [False, True], ids=["serial", "overlap"])  # overlap: the CUDA default
def test_extras_measure_the_phase_split_and_a_decode_step_both_ways(model_dir, overlap):
    llm = _llm(model_dir, overlap_postprocess=overlap)
    extras = serve_throughput.engine_extras(llm, REQS, profile=True, batch=4, prompt_len=12)
    assert "extras_failed" not in extras
    split = extras["phase_split"]
    assert split["num_requests"] == len(REQS) and split["wall_s"] > 0
    assert {"schedule", "prepare_inputs", "forward", "sample", "postprocess", "other"} <= set(split["phases_s"])
    for mode in ("cuda_graphs", "eager"):
        step = extras["decode_step"][mode]
        assert step["batch_size"] == 4 and step["context_tokens"] >= 12 and step["wall_s_per_step"] > 0
        assert step["gpu_busy_s_per_step"] is None and step["kernels_per_step"] == 0  # no device events on a CPU
    assert llm.engine.runner.graphs is not None and not llm.engine.has_unfinished_requests()
    assert "schedule" not in vars(llm.engine.scheduler)  # the phase timers are unwrapped


def test_a_failing_extra_is_recorded_and_the_rest_still_measured(model_dir, monkeypatch):
    llm = _llm(model_dir)
    real = serve_throughput.profile_decode_steps
    calls = []

    def failing_once(llm, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:  # dies with its 4 requests in the engine, as a profiler error would
            for r in REQS[:4]:
                llm.engine.add_request(r["prompt"], SamplingParams.greedy(50, ignore_eos=True))
            llm.engine.step()
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")
        return real(llm, **kwargs)

    monkeypatch.setattr(serve_throughput, "profile_decode_steps", failing_once)
    extras = serve_throughput.engine_extras(llm, REQS, profile=True, batch=4, prompt_len=12)
    assert extras["extras_failed"] == {"decode_step.cuda_graphs": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"}
    assert "phase_split" in extras and set(extras["decode_step"]) == {"eager"}
    assert extras["decode_step"]["eager"]["batch_size"] == 4  # measured on an engine cleared of the failed one's
    assert llm.engine.runner.graphs is not None and not llm.engine.has_unfinished_requests()
    outs = llm.generate([REQS[0]["prompt"]], SamplingParams.greedy(3, ignore_eos=True))
    assert len(outs[0].token_ids) == 3


def test_an_engine_left_unusable_skips_the_later_extras(model_dir, monkeypatch):
    llm = _llm(model_dir)

    def dead_engine(llm, **kwargs):
        llm.engine.add_request(REQS[0]["prompt"], SamplingParams.greedy(50, ignore_eos=True))

        def step(*args, **kwargs):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

        llm.engine.step = step
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(serve_throughput, "profile_decode_steps", dead_engine)
    extras = serve_throughput.engine_extras(llm, REQS, profile=True, batch=4, prompt_len=12)
    failed = extras["extras_failed"]
    assert "phase_split" in extras and "decode_step" not in extras
    assert "clearing the engine then failed too" in failed["decode_step.cuda_graphs"]
    assert failed["decode_step.eager"] == "skipped: the engine was left unusable by decode_step.cuda_graphs"
    assert llm.engine.runner.graphs is not None  # restored all the same
