"""Request outputs copy no token list when the engine makes them, yet stay what they were when made; the
HTTP server's mailbox hands outputs to asyncio queues in order, with one event-loop wake-up per flush."""

import asyncio
import threading

import pytest

from accelkit.serve.outputs import RequestMetrics, RequestOutput
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.sequence import Sequence, SequenceStatus


def test_an_engine_snapshot_does_not_change_when_the_sequence_grows():
    seq = Sequence("r", [1, 2, 3], SamplingParams.greedy(8), arrival_time=1.0)
    seq.first_scheduled_time, seq.first_token_time, seq.last_token_time = 2.0, 3.0, 3.0
    seq.token_ids += [10, 11]
    out = RequestOutput.of(seq, text="a b", new_text=" b", num_returned_tokens=1)
    seq.token_ids += [12, 13]  # later steps
    seq.last_token_time, seq.num_preemptions = 5.0, 1
    seq.status, seq.finish_reason, seq.finished_time = SequenceStatus.FINISHED, "length", 6.0
    assert out.prompt_token_ids == [1, 2, 3] and out.token_ids == [10, 11] and out.new_token_ids == [11]
    assert out.num_new_tokens == 1 and not out.finished and out.finish_reason is None
    m = out.metrics
    assert (m.last_token_time, m.num_generation_tokens, m.num_preemptions, m.finished_time) == (3.0, 2, 0, None)
    assert m.ttft_s == 2.0 and out.text == "a b" and out.new_text == " b"
    done = RequestOutput.of(seq, text="a b c d", new_text=" c d", num_returned_tokens=2)
    assert done.finished and done.finish_reason == "length" and done.new_token_ids == [12, 13]
    assert done.metrics.e2e_s == 5.0 and done.metrics.num_preemptions == 1
    assert "token_ids=[12, 13]" not in repr(out) and "token_ids=[10, 11]" in repr(out)


def test_an_output_built_from_keywords_holds_what_it_was_given():
    metrics = RequestMetrics(arrival_time=0.0, num_prompt_tokens=2)
    out = RequestOutput(request_id="x", prompt="p", prompt_token_ids=[1, 2], text="t", token_ids=[3, 4], new_text="t",
                        new_token_ids=[4], finished=True, finish_reason="stop", metrics=metrics)
    assert (out.prompt_token_ids, out.token_ids, out.new_token_ids, out.num_new_tokens) == ([1, 2], [3, 4], [4], 1)
    assert out.metrics is metrics and out.error is None


def test_the_mailbox_delivers_in_order_with_one_wake_up_per_flush():
    from accelkit.serve.server.state import Mailbox

    loop = asyncio.new_event_loop()
    wakeups = []
    call_soon_threadsafe = loop.call_soon_threadsafe

    def counting(*args):
        wakeups.append(1)
        return call_soon_threadsafe(*args)

    loop.call_soon_threadsafe = counting
    box = Mailbox(loop)
    queues = [asyncio.Queue() for _ in range(3)]
    got = {i: [] for i in range(3)}

    async def consume(i, n):
        for _ in range(n):
            got[i].append(await queues[i].get())

    def engine_thread():  # 10 steps of 3 outputs each, flushed after each step like EngineLoop does
        for step in range(10):
            for i in range(3):
                box.put(queues[i], (step, i))
            box.flush()
            box.flush()  # nothing new: no second wake-up

    t = threading.Thread(target=engine_thread)
    t.start()
    async def main():
        await asyncio.wait_for(asyncio.gather(*(consume(i, 10) for i in range(3))), 10)

    loop.run_until_complete(main())
    t.join()
    assert got == {i: [(step, i) for step in range(10)] for i in range(3)}
    assert 1 <= len(wakeups) <= 10
    loop.close()
    with pytest.raises(RuntimeError, match="closed"):  # its request gets aborted by the engine loop
        box.put(queues[0], "late")
