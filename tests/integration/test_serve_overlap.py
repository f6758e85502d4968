"""Overlapped postprocessing (``overlap_postprocess``): step N's detokenizing and outputs run while step N+1
computes, between the launch of its sampling and the read of the sampled ids. Same outputs as serial
postprocessing (tests/integration/test_serve_engine.py and test_serve_isolation.py run both ways); here:
where the work happens, when outputs arrive, and what ``auto`` picks."""

import pytest

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import random_prompts, save_tiny_model

PROMPTS = random_prompts(4, min_len=4, max_len=20, seed=11)
GREEDY = SamplingParams.greedy(5, ignore_eos=True)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("overlap") / "m", "tiny-llama", seed=2)


def _engine(model_dir, **kwargs):
    return LLM(str(model_dir), kv_cache_memory_bytes=4 << 20, **kwargs).engine


def test_auto_overlaps_only_where_the_device_runs_apart_from_the_host(model_dir):
    assert _engine(model_dir).overlap_postprocess is False  # on a CPU the forward runs in this thread
    assert _engine(model_dir, overlap_postprocess=True).overlap_postprocess is True


def test_the_last_steps_postprocessing_runs_between_launch_and_read(model_dir, monkeypatch):
    engine = _engine(model_dir, overlap_postprocess=True)
    events = []
    launch, postprocess = engine.runner.sampler.launch, engine.output_processor.process

    def recording_launch(logits, params, seq_ids, extras=None, **options):
        events.append("launch")
        ids = launch(logits, params, seq_ids, extras, **options)
        real_tolist = ids.tolist

        class Ids:  # the sampled ids; the runner reads them with tolist() — the step's host sync
            def tolist(self):
                events.append("read")
                return real_tolist()

        return Ids()

    def recording_postprocess(seqs):
        events.append("postprocess")
        return postprocess(seqs)

    monkeypatch.setattr(engine.runner.sampler, "launch", recording_launch)
    monkeypatch.setattr(engine.output_processor, "process", recording_postprocess)
    for prompt in PROMPTS:
        engine.add_request(prompt, GREEDY)
    while engine.has_unfinished_requests():
        engine.step()
    # the first step has nothing to postprocess; every later one postprocesses its predecessor in its window;
    # the last tokens are postprocessed by a step with nothing left to run
    steps = len([e for e in events if e == "launch"])
    assert events == ["launch", "read"] + ["launch", "postprocess", "read"] * (steps - 1) + ["postprocess"]


def test_outputs_arrive_one_step_later_and_nothing_is_lost(model_dir):
    serial, overlapped = _engine(model_dir), _engine(model_dir, overlap_postprocess=True)
    got: dict[str, dict[str, list[str]]] = {"serial": {}, "overlapped": {}}
    first_outputs_at = {}
    for name, engine in (("serial", serial), ("overlapped", overlapped)):
        for i, prompt in enumerate(PROMPTS):
            engine.add_request(prompt, GREEDY, request_id=f"r{i}")
        step = 0
        while engine.has_unfinished_requests():
            step += 1
            for out in engine.step():
                first_outputs_at.setdefault(name, step)
                got[name].setdefault(out.request_id, []).append(out.new_text)
                if out.finished:
                    assert out.text == "".join(got[name][out.request_id])
        assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    assert got["overlapped"] == got["serial"]  # the same deltas, output by output
    assert first_outputs_at["overlapped"] == first_outputs_at["serial"] + 1


def test_an_abort_delivers_the_pending_tokens_first(model_dir):
    engine = _engine(model_dir, overlap_postprocess=True)
    engine.add_request(PROMPTS[0], SamplingParams.greedy(50, ignore_eos=True), request_id="a")
    outputs = []
    while not outputs:  # until the first token is out (its successor is pending)
        outputs = engine.step()
    assert engine._deferred  # a step's tokens wait for the next step's window
    engine.abort_request("a")
    outputs += engine.step()
    assert [o.finished for o in outputs] == [False, False, True] and outputs[-1].finish_reason == "abort"
    assert len(outputs[-1].token_ids) == 2 and not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
