"""One request's failure inside a step fails that request only: the engine bisects the batch, the others get
exactly the tokens they would have got, KV blocks come back, and only a dead device stops the engine."""

import logging

import pytest

from accelkit.serve import LLM, EngineLoop, SamplingParams
from accelkit.serve.testing import save_tiny_model

PROMPTS = [[5 + 7 * i, 6 + i, 9, 11 + i] for i in range(7)]
GREEDY = SamplingParams.greedy(6, ignore_eos=True)


@pytest.fixture(scope="module", params=[False, True], ids=["serial", "overlapped-postprocess"])
def llm(tmp_path_factory, request):
    """Both ways of postprocessing: after each step, and during the next step (the default on CUDA)."""
    return LLM(str(save_tiny_model(tmp_path_factory.mktemp("iso") / "tiny")), kv_cache_memory_bytes=4 << 20,
               max_num_seqs=16, overlap_postprocess=request.param)


@pytest.fixture(scope="module")
def reference(llm):
    return [o.text for o in llm.generate(PROMPTS, GREEDY)]


@pytest.fixture
def poisoned(llm, monkeypatch):
    """Make the model runner raise for any batch holding a request whose id is in the returned set."""
    engine = llm.engine
    real = engine.runner.execute
    poison: set[str] = set()

    def execute(batch, **kw):  # kw: the engine's overlap callback
        if any(seq.request_id in poison for seq in batch.seqs):
            raise RuntimeError("simulated kernel failure on a poisoned request")
        return real(batch, **kw)

    monkeypatch.setattr(engine.runner, "execute", execute)
    yield poison
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks  # every block came back


def _run(engine, ids):
    final = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out
    assert set(final) == set(ids)
    return final


def test_a_request_failing_inside_a_step_fails_alone(llm, reference, poisoned, caplog):
    engine = llm.engine
    errors_before = engine.get_stats().requests_finished["error"]
    poisoned.add("bad-3")
    ids = [engine.add_request(p, GREEDY, request_id="bad-3" if i == 3 else f"ok-{i}") for i, p in enumerate(PROMPTS)]
    with caplog.at_level(logging.ERROR, logger="accelkit.serve"):
        final = _run(engine, ids)
    bad = final.pop("bad-3")
    assert bad.finish_reason == "error" and "simulated kernel failure" in bad.error
    assert {rid: out.text for rid, out in final.items()} == {f"ok-{i}": reference[i] for i in range(7) if i != 3}
    assert all(out.finish_reason == "length" and out.error is None for out in final.values())
    assert "bad-3" in caplog.text and "simulated kernel failure" in caplog.text  # logged with its id
    assert engine.get_stats().requests_finished["error"] == errors_before + 1


def test_when_every_request_of_a_step_fails_but_the_device_works_the_engine_goes_on(llm, reference, poisoned):
    engine = llm.engine
    poisoned.update({"bad-a", "bad-b"})
    final = _run(engine, [engine.add_request(PROMPTS[0], GREEDY, request_id=r) for r in ("bad-a", "bad-b")])
    assert {o.finish_reason for o in final.values()} == {"error"}
    assert _run(engine, [engine.add_request(PROMPTS[1], GREEDY, request_id="after")])["after"].text == reference[1]


def test_a_request_ended_by_a_stop_string_during_a_failed_step_is_never_re_run(llm, reference, poisoned):
    """Overlapped: the failed step's re-runs are where the previous step's postprocessing finishes requests
    (stop strings). A finished request's blocks and host table row are already free — another's, perhaps — so
    running it again would write its K/V into someone else's blocks. It must not run again."""
    engine = llm.engine
    runner_execute = engine.runner.execute  # the poisoned one
    ran_finished: list[str] = []

    def execute(batch, **kw):
        ran_finished.extend(seq.request_id for seq in batch.seqs if seq.is_finished)
        return runner_execute(batch, **kw)

    engine.runner.execute = execute
    words = [reference[i].split() for i in (2, 4)]
    assert all(w[2] not in w[:2] for w in words)  # each stops at its third token, not before
    long = SamplingParams.greedy(12, ignore_eos=True)
    engine.add_request(PROMPTS[0], long, request_id="live-0")
    engine.add_request(PROMPTS[1], long, request_id="live-1")
    for i, w in zip((2, 4), words, strict=True):
        engine.add_request(PROMPTS[i], SamplingParams.greedy(6, ignore_eos=True, stop=(" " + w[2],)),
                           request_id=f"stop-{i}")
    final = {}
    for _ in range(3):  # prefill and two decodes: the stop strings' tokens are sampled in the third step
        final.update({o.request_id: o for o in engine.step() if o.finished})
    poisoned.add("bad")
    engine.add_request(PROMPTS[5], GREEDY, request_id="bad")  # joins the next step, which fails
    final.update(_run(engine, (set(engine.output_processor.requests) | {"bad"}) - set(final)))
    assert ran_finished == []
    assert final["bad"].finish_reason == "error"
    assert final["stop-2"].finish_reason == final["stop-4"].finish_reason == "stop"
    assert [final[f"stop-{i}"].text.split() for i in (2, 4)] == [w[:2] for w in words]  # cut before the stop
    for i in (0, 1):  # their K/V was never overwritten
        assert final[f"live-{i}"].text.split()[:6] == reference[i].split()
    assert not engine.runner.host_tables._entries  # every host block-table row came back
    again = llm.generate([PROMPTS[2]], GREEDY)[0]  # the prefix cache still holds what it says
    assert again.text == reference[2]


def test_a_failing_detokenizer_fails_its_request_only(llm, reference):
    engine = llm.engine
    engine.add_request(PROMPTS[0], GREEDY, request_id="detok-bad")
    engine.add_request(PROMPTS[1], GREEDY, request_id="detok-ok")

    class Broken:
        def add(self, *_args, **_kwargs):
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "simulated")

    engine._inbox[0].detokenizer = Broken()  # the request is still in the inbox: swap in a broken detokenizer
    final = _run(engine, ["detok-bad", "detok-ok"])
    assert final["detok-bad"].finish_reason == "error" and "UnicodeDecodeError" in final["detok-bad"].error
    assert final["detok-ok"].text == reference[1]
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def test_a_dead_device_stops_the_engine_with_the_reason(tmp_path, monkeypatch):
    from accelkit.serve.isolation import EngineDeadError

    llm = LLM(str(save_tiny_model(tmp_path / "tiny")), kv_cache_memory_bytes=2 << 20)

    def lost(batch, **kw):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(llm.engine.runner, "execute", lost)
    loop = EngineLoop(llm.engine).start()
    stream = loop.add_request(PROMPTS[0], GREEDY)
    with pytest.raises(RuntimeError, match="engine loop failed"):
        list(stream)
    loop._thread.join(10)
    assert not loop.is_alive and isinstance(loop.error, EngineDeadError)
    assert "one-token test step" in loop.dead_reason and "illegal memory access" in loop.dead_reason


def test_the_loop_survives_callbacks_that_raise(llm, reference):
    calls = []

    def on_step(stats):
        calls.append(stats)
        raise ValueError("metrics backend down")

    def bad_callback(out):
        raise RuntimeError("Event loop is closed")

    with EngineLoop(llm.engine, on_step=on_step) as loop:
        loop.add_request(PROMPTS[2], GREEDY, request_id="cb-bad", callback=bad_callback)
        good = loop.add_request(PROMPTS[3], GREEDY, request_id="cb-good")
        assert good.result().text == reference[3]
        assert loop.is_alive and calls
    assert llm.engine.block_manager.num_free_blocks == llm.engine.block_manager.num_blocks


@pytest.mark.parametrize("ending", ["dies", "stops"])
def test_a_request_made_while_the_loop_ends_is_refused_not_orphaned(tmp_path, monkeypatch, ending):
    """The loop dies (or is stopped) while a request is being tokenized: add_request must refuse it — a request
    queued after the loop failed its streams would never hear back (an HTTP handler would wait forever)."""
    import time

    from accelkit.serve.isolation import EngineDeadError

    engine = LLM(str(save_tiny_model(tmp_path / "tiny")), kv_cache_memory_bytes=2 << 20).engine
    loop = EngineLoop(engine).start()

    def dead_step(*args, **kwargs):
        raise EngineDeadError("device lost (simulated)")

    real_make = engine.make_request

    def make_request(*args, **kwargs):  # the loop ends after the request's first checks, while it is tokenized
        seq = real_make(*args, **kwargs)
        if ending == "dies":
            monkeypatch.setattr(engine, "step", dead_step)
            loop.abort_request("nobody")  # wakes the loop, whose next step dies
            deadline = time.monotonic() + 30
            while loop.error is None and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            loop.stop(timeout=30)
        return seq

    monkeypatch.setattr(engine, "make_request", make_request)
    with pytest.raises(RuntimeError, match="dead" if ending == "dies" else "stopped"):
        loop.add_request(PROMPTS[0], GREEDY)
    assert not loop._sinks
