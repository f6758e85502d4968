"""Engine behaviour around the model: bad input, abort, stop strings, sampling, timings, the background loop."""

import json
import threading
import time

import pytest
import torch

from accelkit.serve import LLM, EngineLoop, SamplingParams
from accelkit.serve.testing import random_prompts, save_tiny_model

KV_BYTES = 8 * 2**20
PROMPTS = random_prompts(6, min_len=4, max_len=40, seed=3)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("engine") / "m", "tiny-llama", seed=5)


@pytest.fixture(scope="module", params=[False, True], ids=["serial", "overlapped-postprocess"])
def llm(model_dir, request):
    """Both ways of postprocessing: after each step, and during the next step (the default on CUDA)."""
    return LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_model_len=128, overlap_postprocess=request.param)


@pytest.fixture(scope="module")
def greedy_ref(llm):
    return [o.token_ids for o in llm.generate(PROMPTS, SamplingParams.greedy(12))]


# ---- bad input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"max_tokens": 0}, "max_tokens"), ({"temperature": -0.5}, "temperature"), ({"top_p": 0.0}, "top_p"),
     ({"top_p": 1.5}, "top_p"), ({"top_k": -2}, "top_k"), ({"stop": ("",)}, "stop")],
)
def test_bad_sampling_params_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_unknown_architecture_names_the_field(tmp_path, model_dir):
    bad = tmp_path / "bad"
    bad.mkdir()
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg["architectures"] = ["GPTBigCodeForCausalLM"]
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="architectures"):
        LLM(str(bad))
    with pytest.raises(ValueError, match="config.json"):
        LLM(str(tmp_path / "missing"))


def test_a_tokenizer_that_fails_to_load_says_why_and_asks_for_files_only_when_there_are_none(tmp_path, model_dir):
    """Found in review: a directory holding tokenizer.json was told it "needs tokenizer.json" whatever failed."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    (broken / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "NoSuchModel"}}')
    with pytest.raises(ValueError, match="cannot load the tokenizer") as refused:
        LLM(str(broken), kv_cache_memory_bytes=KV_BYTES)
    assert "needs tokenizer.json" not in str(refused.value) and "Error" in str(refused.value)  # the library's own
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (broken / name).unlink()
    with pytest.raises(ValueError, match="the directory needs tokenizer.json"):
        LLM(str(broken), kv_cache_memory_bytes=KV_BYTES)


def test_engine_config_errors_name_the_field(model_dir):
    for kwargs, field in [({"kv_cache_dtype": "fp4"}, "kv_cache_dtype"), ({"block_size": 0}, "block_size"),
                          ({"max_model_len": 4096}, "max_model_len"), ({"kv_cache_memory_bytes": 1000}, "kv_cache_memory_bytes")]:
        with pytest.raises(ValueError, match=field):
            LLM(str(model_dir), **kwargs)


def test_bad_requests_fail_alone(llm, greedy_ref):
    engine = llm.engine
    ids = [engine.add_request(p, SamplingParams.greedy(12)) for p in PROMPTS[:3]]
    engine.step()  # the good requests are in flight
    for prompt, field in [(list(range(4, 4 + 128)), "max_model_len"), ([], "prompt"), ([5, 99999], "prompt_token_ids"),
                          (3.5, "prompt")]:
        with pytest.raises(ValueError, match=field):
            engine.add_request(prompt, SamplingParams.greedy(4))
    with pytest.raises(ValueError, match="request_id"):
        engine.add_request(PROMPTS[0], request_id=ids[0])
    with pytest.raises(ValueError, match="max_tokens"):
        engine.add_request(PROMPTS[0], SamplingParams(max_tokens=0))
    final = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out.token_ids
    assert [final[i] for i in ids] == greedy_ref[:3]
    # LLM.generate validates the whole batch first: a bad prompt raises and nothing is queued
    with pytest.raises(ValueError, match=r"prompts\[1\].*max_model_len"):
        llm.generate([PROMPTS[0], list(range(4, 200))], SamplingParams.greedy(4))
    assert not engine.has_unfinished_requests()


# ---- abort, stop, lengths ------------------------------------------------------------------------------
def test_abort_at_any_point_frees_blocks(llm, greedy_ref):
    engine = llm.engine
    ids = [engine.add_request(p, SamplingParams.greedy(12)) for p in PROMPTS]
    engine.abort_request(ids[0])  # still in the inbox
    outs = engine.step() + engine.step()
    engine.abort_request(ids[1])  # running
    engine.abort_request("no-such-request")
    while engine.has_unfinished_requests():
        outs += engine.step()
    final = {out.request_id: out for out in outs if out.finished}
    assert final[ids[0]].finish_reason == "abort" and final[ids[0]].token_ids == []
    assert final[ids[1]].finish_reason == "abort"
    assert [final[i].token_ids for i in ids[2:]] == greedy_ref[2:]
    assert engine.block_manager.usage == 0.0


def test_stop_strings_stop_tokens_and_eos(llm, greedy_ref):
    ref = greedy_ref[0]
    stop_word = llm.tokenizer.decode([ref[4]])
    full = llm.generate(PROMPTS[0], SamplingParams.greedy(12))[0]
    first = full.text.find(stop_word)
    out = llm.generate(PROMPTS[0], SamplingParams.greedy(12, stop=(stop_word,)))[0]
    assert out.finish_reason == "stop" and out.text == full.text[:first]
    out = llm.generate(PROMPTS[0], SamplingParams.greedy(12, stop_token_ids=(ref[3],)))[0]
    assert out.finish_reason == "stop" and out.token_ids == ref[: ref.index(ref[3]) + 1]
    out = llm.generate(PROMPTS[0], SamplingParams.greedy(5))[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 5
    # the text of the whole output equals decoding its token ids
    assert full.text.strip() == llm.tokenizer.decode(full.token_ids).strip()


def test_a_stream_never_shows_the_start_of_a_stop_string_that_then_matches(llm, greedy_ref):
    """A stop string spanning two tokens: its first token's text was streamed before the second made it match,
    so a streaming client saw text the final output does not have. Now the stream holds back what could still
    begin a stop string, and its deltas add up to the final text; an abort hands out what was held back."""
    engine, ref = llm.engine, greedy_ref[1]
    stop = llm.tokenizer.decode(ref[5:7])  # e.g. "w12 w40": the 6th and 7th tokens' text
    final_text = llm.generate(PROMPTS[1], SamplingParams.greedy(12, stop=(stop,)))[0].text
    engine.add_request(PROMPTS[1], SamplingParams.greedy(12, stop=(stop,)), request_id="s")
    streamed = []
    while engine.has_unfinished_requests():
        streamed += engine.step()
    assert streamed[-1].finish_reason == "stop" and streamed[-1].text == final_text
    text = ""
    for out in streamed:
        text += out.new_text
        assert out.text == text and final_text.startswith(text), (text, final_text)
    assert text == final_text
    # what is held back while running comes out when the request ends some other way
    engine.add_request(PROMPTS[1], SamplingParams.greedy(12, stop=("w9999 w9999",)), request_id="a")
    streamed = [out for _ in range(4) for out in engine.step()]
    engine.abort_request("a")
    while engine.has_unfinished_requests():
        streamed += engine.step()
    last = streamed[-1]
    assert last.finish_reason == "abort" and "".join(o.new_text for o in streamed) == last.text
    assert last.text.strip() == llm.tokenizer.decode(last.token_ids).strip()


def test_max_model_len_caps_generation(llm):
    prompt = list(range(4, 4 + 120))
    out = llm.generate(prompt, SamplingParams.greedy(50, ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(prompt) + len(out.token_ids) == 128


def test_text_prompts_and_timings(llm):
    out = llm.generate("w10 w11 w12 w13", SamplingParams.greedy(6, ignore_eos=True))[0]
    assert out.prompt_token_ids == [10, 11, 12, 13] and out.text
    m = out.metrics
    assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.last_token_time <= m.finished_time
    assert m.ttft_s > 0 and m.e2e_s >= m.ttft_s and m.num_generation_tokens == 6 and m.queue_time_s >= 0


def test_streamed_outputs_are_snapshots_and_final_only_gives_the_same_result(llm, greedy_ref):
    """Per-step outputs keep what they held when made (their lists are not copied by the engine but must not
    grow afterwards); a final-only request (what LLM.generate uses) gets one output equal to the stream's end."""
    engine = llm.engine
    params = SamplingParams.greedy(12, stop=("w9999",))  # a stop string that never hits: incremental text checked
    engine.add_request(PROMPTS[0], params, request_id="streamed")
    engine.add_request(PROMPTS[0], params, request_id="final", final_only=True)
    streamed, final = [], []
    while engine.has_unfinished_requests():
        for out in engine.step():
            (streamed if out.request_id == "streamed" else final).append(out)
    assert len(final) == 1 and final[0].finished and len(streamed) == len(greedy_ref[0])
    ids, text = [], ""
    for i, out in enumerate(streamed):  # read only now, after the request finished
        ids += out.new_token_ids
        text += out.new_text
        assert out.token_ids == ids == greedy_ref[0][: i + 1] and out.text == text
        assert out.num_new_tokens == 1 and out.metrics.num_generation_tokens == i + 1
        assert out.finished == (i == len(streamed) - 1)
        assert (out.metrics.finished_time is None) == (not out.finished)
        assert out.prompt_token_ids == streamed[0].prompt_token_ids
    assert [o.metrics.last_token_time for o in streamed] == sorted(o.metrics.last_token_time for o in streamed)
    last, only = streamed[-1], final[0]
    assert (only.token_ids, only.text, only.finish_reason) == (last.token_ids, last.text, last.finish_reason)
    assert (only.new_token_ids, only.new_text) == (last.new_token_ids, last.new_text)  # as before final_only existed


# ---- sampling ----------------------------------------------------------------------------------------
def test_seeded_sampling_is_reproducible_whatever_the_batch(llm):
    params = SamplingParams(temperature=0.8, top_p=0.9, top_k=50, max_tokens=10, seed=1234)
    alone = llm.generate(PROMPTS[0], params)[0].token_ids
    batched = llm.generate(PROMPTS, [params] + [SamplingParams(temperature=1.0, max_tokens=10)] * 5)[0].token_ids
    assert alone == batched
    other = llm.generate(PROMPTS[0], params.replace(seed=99))[0].token_ids
    assert other != alone


def test_top_k_1_is_greedy_and_top_p_tiny_is_greedy(llm, greedy_ref):
    outs = llm.generate(PROMPTS, SamplingParams(temperature=1.0, top_k=1, max_tokens=12))
    assert [o.token_ids for o in outs] == greedy_ref
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0.7, top_p=1e-6, max_tokens=12))
    assert [o.token_ids for o in outs] == greedy_ref


@pytest.mark.parametrize("overlap", [False, True])
def test_priority_policy_serves_urgent_requests_first(model_dir, overlap):
    llm = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_num_seqs=1, scheduling_policy="priority",
              overlap_postprocess=overlap)  # one sequence at a time: with overlap, a row is taken before one is freed
    outs = llm.generate(PROMPTS[:3], SamplingParams.greedy(3), priority=[5, 0, -5])
    order = sorted(range(3), key=lambda i: outs[i].metrics.first_token_time)
    assert order == [2, 1, 0]


# ---- background loop (what the HTTP server uses) ---------------------------------------------------------
def test_engine_loop_streams_from_many_threads_and_aborts(llm, greedy_ref):
    steps = []
    with EngineLoop(llm.engine, on_step=steps.append) as loop:
        results = {}

        def client(i):
            stream = loop.add_request(PROMPTS[i], SamplingParams.greedy(12))
            chunks = [out.new_token_ids for out in stream]
            results[i] = [t for c in chunks for t in c]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [results[i] for i in range(len(PROMPTS))] == greedy_ref

        # abort mid-stream: the stream ends with finish_reason abort and the blocks come back
        stream = loop.add_request(PROMPTS[0], SamplingParams.greedy(100, ignore_eos=True))
        it = iter(stream)
        next(it)
        stream.abort()
        last = list(it)[-1]
        assert last.finished and last.finish_reason == "abort"
        with pytest.raises(ValueError, match="max_tokens"):
            loop.add_request(PROMPTS[0], SamplingParams(max_tokens=0))
        assert loop.is_alive
    stats = llm.engine.get_stats()
    assert stats.kv_cache_usage == 0.0 and stats.num_running == 0 and stats.num_waiting == 0
    assert stats.requests_finished["abort"] >= 1 and stats.generation_tokens > 0 and steps
    assert not loop.is_alive


def test_engine_loop_flush_hooks_follow_each_steps_outputs_and_a_failing_one_stops_nothing(llm, greedy_ref):
    """A flush hook (the HTTP server's mailbox) runs after every step's outputs were handed out, so nothing
    waits in a buffer; one that raises (its event loop closed) is logged and the loop serves on."""
    events: list = []
    done = threading.Event()

    def sink(out):
        events.append(out)
        if out.finished:
            done.set()

    def closed():
        raise RuntimeError("Event loop is closed")

    with EngineLoop(llm.engine) as loop:
        loop.add_flush_hook(closed)
        loop.add_flush_hook(lambda: events.append("flush"))
        loop.add_request(PROMPTS[1], SamplingParams.greedy(12), callback=sink)
        assert done.wait(60)
        assert loop.add_request(PROMPTS[2], SamplingParams.greedy(12)).result().token_ids == greedy_ref[2]
        assert loop.is_alive
    outs = [e for e in events if e != "flush"]
    assert [t for o in outs for t in o.new_token_ids] == greedy_ref[1] and outs[-1].finished
    assert all(events[i + 1] == "flush" for i, e in enumerate(events) if e != "flush")


def test_engine_loop_death_fails_open_streams(model_dir):
    llm = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES)

    def broken(batch, **kw):
        raise RuntimeError("device lost")

    llm.engine.runner.execute = broken
    with EngineLoop(llm.engine) as loop:
        stream = loop.add_request(PROMPTS[0], SamplingParams.greedy(4))
        with pytest.raises(RuntimeError, match="device lost"):
            stream.result()
        assert not loop.is_alive and "device lost" in str(loop.error)
        with pytest.raises(RuntimeError, match="dead"):
            loop.add_request(PROMPTS[0], SamplingParams.greedy(4))


def test_identical_prompts_admitted_together_share_their_prefix(model_dir):
    """The n choices of one prompt (or a burst behind one system prompt) arrive together; blocks are registered only
    once computed, so each computed the whole prompt (n=4 over HTTP: 0 prefix hits of 640 tokens looked up). Now the
    later ones wait for the first's blocks and take them from the cache — same tokens."""
    llm = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_model_len=128)
    prompt = list(range(4, 4 + 70))
    alone = llm.generate(prompt, SamplingParams.greedy(6, ignore_eos=True))[0].token_ids
    before = llm.engine.get_stats()
    outs = llm.generate([prompt] * 4, SamplingParams.greedy(6, ignore_eos=True))
    after = llm.engine.get_stats()
    assert [o.token_ids for o in outs] == [alone] * 4
    full = (len(prompt) - 1) // llm.engine.block_manager.block_size * llm.engine.block_manager.block_size
    # all four hit what the first generate() left in the cache; the new rule matters on a cold cache:
    cold = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_model_len=128)
    cold_outs = cold.generate([prompt] * 4, SamplingParams.greedy(6, ignore_eos=True))
    stats = cold.engine.get_stats()
    assert [o.token_ids for o in cold_outs] == [alone] * 4
    assert stats.prefix_cache_hits == 3 * full, (stats.prefix_cache_hits, full)
    assert after.prefix_cache_hits - before.prefix_cache_hits == 4 * full


def test_a_loop_that_builds_its_engine_runs_all_of_its_torch_work_on_one_thread(model_dir, greedy_ref):
    """EngineLoop.build (what the server uses): the engine is made on the loop's thread and stepped there — an
    engine built on one thread and stepped on another left two OpenMP teams alive and ran 3x slower on a CPU. What
    the factory raises is raised to the caller, and no loop is left running. ``cpu_threads`` is the stepping thread's
    torch thread count (a thread's OpenMP team is its own: set anywhere else it would not apply)."""
    from accelkit.serve.config import EngineConfig
    from accelkit.serve.engine import LLMEngine

    threads: dict[str, threading.Thread] = {}
    torch_threads: set[int] = set()

    def make_engine() -> LLMEngine:
        threads["built"] = threading.current_thread()
        return LLMEngine(EngineConfig(model=str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_model_len=128,
                                      cpu_threads=1))

    loop = EngineLoop.build(make_engine)
    try:
        step = loop.engine.step

        def recording_step(*args, **kwargs):
            threads["stepped"] = threading.current_thread()
            torch_threads.add(torch.get_num_threads())
            return step(*args, **kwargs)

        loop.engine.step = recording_step
        tokens = [loop.add_request(p, SamplingParams.greedy(12)).result().token_ids for p in PROMPTS]
        assert tokens == greedy_ref
        assert threads["built"] is threads["stepped"] is not threading.main_thread()
        assert threads["built"].name == "accelkit-engine"
        assert torch_threads == {1}  # (a new thread's default is one per usable core)
    finally:
        loop.stop()
    assert not loop.is_alive

    def broken() -> LLMEngine:
        raise ValueError("max_model_len=0 is not allowed")

    before = threading.active_count()
    with pytest.raises(ValueError, match="max_model_len=0"):
        EngineLoop.build(broken)
    time.sleep(0.05)
    assert threading.active_count() == before  # the loop's thread ended with its failed build
