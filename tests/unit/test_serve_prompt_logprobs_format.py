"""vLLM's ``prompt_logprobs`` field as the server writes it from the engine's entries and ranks."""

from accelkit.serve.server.logprobs import LogprobFormatter

V = 50


def test_prompt_logprobs_field_keeps_the_tokens_rank_and_ranks_the_top_by_place():
    """vLLM's prompt_logprobs JSON: null first; the prompt token first with the engine's rank (past k when it is not
    among the top), the top k ranked by place, a tie sharing the rank before it; each its own k."""
    fmt = LogprobFormatter(None)  # (no tokenizer: a token's text is its id)
    top = [(4, -0.5), (9, -1.0), (2, -1.0), (7, -2.0)]
    fields = fmt.prompt_logprobs([1, 9, 3], [None, (-1.0, top), (-6.0, top)], [None, 2, 40], 4)
    assert fields[0] is None
    assert fields[1] == {"9": {"logprob": -1.0, "rank": 2, "decoded_token": "9"},  # its own entry, first
                         "4": {"logprob": -0.5, "rank": 1, "decoded_token": "4"},
                         "2": {"logprob": -1.0, "rank": 2, "decoded_token": "2"},  # tied with 9
                         "7": {"logprob": -2.0, "rank": 4, "decoded_token": "7"}}
    assert list(fields[1]) == ["9", "4", "2", "7"]
    assert fields[2]["3"] == {"logprob": -6.0, "rank": 40, "decoded_token": "3"}
    assert list(fmt.prompt_logprobs([1, 3], [None, (-6.0, top)], [None, 40], 1)[1]) == ["3", "4"]
    assert fmt.prompt_logprobs([1, 3], [None, (float("-inf"), [])], [None, V], 0)[1] == {
        "3": {"logprob": -9999.0, "rank": V, "decoded_token": "3"}}  # -inf as vLLM sends it
