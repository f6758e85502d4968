"""ServingCompletion without HTTP: a parsed CompletionRequest in, a response dict or SSE events out, against a real
tiny engine loop."""

import pytest

from accelkit.serve.server.errors import APIError
from accelkit.serve.server.protocol import CompletionRequest
from accelkit.serve.server.serving_completion import ServingCompletion
from tests.unit.serving_util import MAX_NUM_SEQS, MAX_QUEUE, events, models, run, serving_state, settled

PROMPT = "w10 w11 w12 w13"


@pytest.fixture(scope="module")
def serving():
    state = serving_state()
    return ServingCompletion(state, models(state))


def complete(serving, **fields):
    return run(serving.create_completion(CompletionRequest(**{"prompt": PROMPT, "max_tokens": 5, **fields})))


def streamed(serving, **fields):
    async def go():
        return await events(await serving.create_completion(
            CompletionRequest(**{"prompt": PROMPT, "max_tokens": 5, "stream": True, **fields})))
    return run(go())


def test_a_response_counts_the_prompt_once_and_every_choice(serving):
    data = complete(serving, n=2, temperature=0, ignore_eos=True)
    assert data["object"] == "text_completion" and data["model"] == "tiny" and data["id"].startswith("cmpl-")
    assert [c["index"] for c in data["choices"]] == [0, 1]
    assert all(c["finish_reason"] == "length" and c["logprobs"] is None for c in data["choices"])
    assert data["choices"][0]["text"] == data["choices"][1]["text"]  # greedy: n choices, one answer
    assert data["usage"] == {"prompt_tokens": 4, "completion_tokens": 10, "total_tokens": 14}  # 4 words (no BOS)
    assert settled(serving.state)


def test_the_stream_joins_to_the_full_response_and_ends_with_usage_and_done(serving):
    full = complete(serving, temperature=0, ignore_eos=True)
    chunks = streamed(serving, temperature=0, ignore_eos=True, stream_options={"include_usage": True})
    assert chunks[-1] == "[DONE]"
    *deltas, usage = chunks[:-1]
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in deltas)
    assert "".join(c["choices"][0]["text"] for c in deltas) == full["choices"][0]["text"]
    assert deltas[-1]["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"] == full["usage"]
    assert settled(serving.state)


def test_continuous_usage_is_on_every_chunk_and_grows(serving):
    chunks = streamed(serving, temperature=0, ignore_eos=True,
                      stream_options={"include_usage": True, "continuous_usage_stats": True})[:-1]
    completion = [c["usage"]["completion_tokens"] for c in chunks]
    assert completion == sorted(completion) and completion[-1] == 5


def test_echo_with_max_tokens_0_returns_the_prompt_alone(serving):
    data = complete(serving, echo=True, max_tokens=0)
    assert data["choices"][0]["text"] == PROMPT and data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 0
    echoed = streamed(serving, echo=True, max_tokens=2, temperature=0, ignore_eos=True)
    assert echoed[0]["choices"][0]["text"].startswith(PROMPT)  # the prompt leads the first chunk


def test_logprobs_cover_every_token_and_echo_puts_the_prompts_first(serving):
    data = complete(serving, logprobs=2, temperature=0, ignore_eos=True)
    lp = data["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == 5
    assert all(len(top) <= 3 for top in lp["top_logprobs"])  # k, plus the chosen token when it is not among them
    echoed = complete(serving, logprobs=1, echo=True, temperature=0, ignore_eos=True)["choices"][0]["logprobs"]
    assert len(echoed["tokens"]) == 4 + 5 and echoed["token_logprobs"][0] is None  # nothing precedes the first


def test_best_of_returns_the_n_most_likely_of_its_candidates(serving):
    data = complete(serving, n=1, best_of=3, temperature=1.0, seed=7, ignore_eos=True, logprobs=0)
    assert len(data["choices"]) == 1
    assert data["usage"]["completion_tokens"] == 5  # the returned choice's tokens only
    assert settled(serving.state)


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"prompt": ""}, "prompt", "prompt is empty"),
    ({"max_tokens": 0}, "max_tokens", "max_tokens=0 returns nothing without echo"),
    ({"n": 0}, "n", "n=0 must be at least 1"),
    ({"best_of": 2, "stream": True}, "best_of", "cannot be streamed"),
    ({"priority": 1}, "priority", "--scheduling-policy priority"),
    ({"echo": True, "max_tokens": 0, "min_tokens": 2}, "min_tokens", "asks for tokens that are not returned"),
    ({"max_tokens": 1000}, "max_tokens", "maximum context length"),
    ({"n": MAX_NUM_SEQS + MAX_QUEUE + 1}, "n", "this server runs at most"),
])
def test_refusals_are_400s_naming_the_field(serving, fields, param, words):
    with pytest.raises(APIError) as err:
        complete(serving, **fields)
    assert err.value.status == 400 and err.value.param == param and words in err.value.message
    assert settled(serving.state)  # nothing was queued


def test_a_full_queue_is_a_429_with_retry_after(serving):
    admission = serving.state.admission
    assert admission.try_enter(admission.capacity)  # every seat taken
    try:
        with pytest.raises(APIError) as err:
            complete(serving)
    finally:
        admission.leave(admission.capacity)
    assert err.value.status == 429 and err.value.code == "queue_full" and err.value.headers == {"Retry-After": "1"}


def test_a_client_that_leaves_gets_nothing_and_its_requests_are_aborted(serving):
    async def gone() -> None:
        return None

    body = CompletionRequest(prompt=PROMPT, max_tokens=200, ignore_eos=True, n=2)
    assert run(serving.create_completion(body, disconnected=lambda: gone())) is None
    assert settled(serving.state)


def test_a_stream_closed_early_aborts_its_request(serving):
    async def first_chunk_then_close():
        stream = await serving.create_completion(CompletionRequest(prompt=PROMPT, max_tokens=200, ignore_eos=True,
                                                                   stream=True))
        first = await anext(stream)
        await stream.aclose()  # what the server does when the client disconnects mid-stream
        return first

    assert run(first_chunk_then_close()).startswith("data: ")
    assert settled(serving.state)
