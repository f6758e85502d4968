"""Datasets: random lengths, ShareGPT (selected and filtered as vLLM) and JSONL parsing, errors that name the
entry/line and field."""

import json
import random

import pytest

from accelkit.core import UserError
from accelkit.loadtest import LoadTestConfig
from accelkit.loadtest.datasets import load_dataset, parse_dataset, random_requests, sharegpt_note


def test_random_lengths():
    reqs = random_requests(200, 100, 20, 0.5, random.Random(0))
    assert all(50 <= r.input_len <= 150 and 10 <= r.output_len <= 30 for r in reqs)
    assert all(len(r.prompt.split()) == r.input_len for r in reqs)  # words sent = target length
    assert len({r.input_len for r in reqs}) > 20
    exact = random_requests(5, 64, 8, 0.0, random.Random(0))
    assert {(r.input_len, r.output_len) for r in exact} == {(64, 8)}
    assert len({r.prompt for r in exact}) == 5  # no shared prompts (no prefix-cache hits)


def test_load_random_is_seeded():
    a, info = load_dataset("random", 4, input_len=16, output_len=4, seed=3)
    b, _ = load_dataset("random", 4, input_len=16, output_len=4, seed=3)
    assert a == b and info["kind"] == "random"


def _sharegpt(tmp_path, data):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    return f"sharegpt:{path}"


def _turns(*values, first="human"):
    roles = [first, "gpt" if first == "human" else "human"]
    return {"conversations": [{"from": roles[i % 2], "value": v} for i, v in enumerate(values)]}


def test_sharegpt_selects_and_filters_as_vllm(tmp_path):
    """The first human→gpt pair anywhere in a conversation was taken and every pair kept; vLLM takes
    conversations[0] → prompt and conversations[1] → reference completion, and drops a pair with a prompt or output
    under 4 tokens, a prompt over 1,024 or prompt + output over 2,048 (tokens estimated here as chars / 4)."""
    spec = _sharegpt(tmp_path, [
        _turns("Hello there, how are you?", "x" * 40),                       # 7 and 10 tokens: kept
        _turns("only one turn"),                                             # under 2 turns
        {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "Tell me a story please"},
                           {"from": "gpt", "value": "Once upon a time, a cat."}]},  # prompt 's': 1 token
        _turns("What is 2+2? Please explain.", "4"),                         # a 1-token output
        _turns("p" * 4100, "long answer " * 10),                             # prompt 1,025 tokens
        _turns("q" * 4000, "r" * 4196),                                      # 1,000 + 1,049 = 2,049 tokens
        _turns("a" * 4096, "b" * 4096),                                      # 1,024 + 1,024 = 2,048: kept
        _turns("abcdefghijklmnop", "qrstuvwxyzabcdef"),                       # 4 and 4 tokens: kept
        _turns("Sure, here is what I found:", "Thanks a lot, that helped!", first="gpt"),  # turn 0 is the prompt
    ])
    reqs, info = load_dataset(spec, 4, seed=0)
    assert info["skipped"] == {"under_2_turns": 1, "prompt_under_4_tokens": 1, "output_under_4_tokens": 1,
                               "prompt_over_1024_tokens": 1, "total_over_2048_tokens": 1}
    assert (info["num_conversations"], info["num_skipped"], info["num_available"]) == (9, 5, 4)
    assert "oversampled" not in info
    assert {(r.prompt[:16], r.input_len, r.output_len) for r in reqs} == {
        ("Hello there, how", 7, 10), ("a" * 16, 1024, 1024), ("abcdefghijklmnop", 4, 4),
        ("Sure, here is wh", 7, 7)}
    assert sharegpt_note(spec, info) == (
        f"note: --dataset {spec}: skipped 5 of 9 conversations as `vllm bench serve` skips them (1 under 2 turns, "
        "1 prompt under 4 tokens, 1 output under 4 tokens, 1 prompt over 1024 tokens, 1 total over 2048 tokens; token "
        "lengths estimated as chars / 4); 4 usable")


def _vllm_order(data, seed, n):
    """vLLM's ShareGPTDataset, spelled out: drop conversations under 2 turns, random.seed(seed) + random.shuffle,
    then the first n pairs that pass is_valid_sequence (lengths: chars / 4 here)."""
    kept = [d for d in data if len(d["conversations"]) >= 2]
    random.seed(seed)
    random.shuffle(kept)
    chosen = []
    for d in kept:
        prompt, reply = d["conversations"][0]["value"], d["conversations"][1]["value"]
        p, o = max(1, -(-len(prompt) // 4)), max(1, -(-len(reply) // 4))
        if p >= 4 and o >= 4 and p <= 1024 and p + o <= 2048:
            chosen.append(prompt)
    return chosen[:n]


@pytest.mark.parametrize("seed", [0, 7])
def test_sharegpt_order_is_vllms_for_the_seed(tmp_path, seed):
    """The shuffle ran over the usable pairs only, so the same seed sent other prompts than vLLM's: it shuffles every
    conversation of two turns or more, then skips the unusable ones in that order."""
    data = [_turns(f"prompt number {i} " + "w" * (i % 5), "ok" if i % 3 == 0 else f"reply number {i}") for i in range(40)]
    data += [_turns(f"lone turn {i}") for i in range(5)]
    reqs, info = load_dataset(_sharegpt(tmp_path, data), 10, seed=seed)
    assert [r.prompt for r in reqs] == _vllm_order(data, seed, 10)
    assert info["skipped"]["output_under_4_tokens"] == 14 and info["skipped"]["under_2_turns"] == 5


def test_sharegpt_fixed_output_len(tmp_path):
    """--sharegpt-output-len (vLLM's): every max_tokens is it, the output minimum is waived, the total limit stays."""
    spec = _sharegpt(tmp_path, [_turns("What is 2+2? Please explain.", "4"),  # kept: no output minimum
                                _turns("x" * 400, "a long reply " * 5)])     # 100 + 2,000 > 2,048: skipped
    reqs, info = load_dataset(spec, 2, seed=0, sharegpt_output_len=2000)
    assert {(r.prompt, r.output_len) for r in reqs} == {("What is 2+2? Please explain.", 2000)}
    assert info["skipped"]["total_over_2048_tokens"] == 1 and info["output_len"] == 2000
    with pytest.raises(ValueError, match="sharegpt_output_len applies to a sharegpt:PATH dataset"):
        LoadTestConfig(base_url="http://127.0.0.1:1", model="m", sharegpt_output_len=8)


@pytest.mark.parametrize(("data", "needle"), [
    ({"conversations": []}, "expected a JSON list"),
    ([{"id": 1}], "entry 0 has no 'conversations'"),
    ([{"conversations": "hi"}], "entry 0 field 'conversations'"),
    ([{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt"}]}], r"entry 0 conversations\[1\]"),
    ([{"conversations": [{"from": "human", "value": "a"}]}], "no usable prompts"),
    ([{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "a fine long reply"}]}],
     r"no usable prompts in the file: skipped 1 of 1 conversations .*\(1 prompt under 4 tokens;"),
])
def test_sharegpt_errors(tmp_path, data, needle):
    with pytest.raises(UserError, match=needle):
        load_dataset(_sharegpt(tmp_path, data), 1)


def test_sharegpt_not_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("[{")
    with pytest.raises(UserError, match="not valid JSON"):
        load_dataset(f"sharegpt:{path}", 1)


def test_jsonl(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "one two three", "output_len": 5}\n\n{"prompt": "four"}\n')
    reqs, _ = load_dataset(f"jsonl:{path}", 2, output_len=9)
    assert [(r.prompt, r.output_len) for r in reqs] == [("one two three", 5), ("four", 9)]


@pytest.mark.parametrize(("lines", "needle"), [
    ('{"prompt": "ok"}\n{"prompt": ', "line 2: not valid JSON"),
    ('{"prompt": ""}', "line 1: field 'prompt'"),
    ('{"text": "hi"}', "line 1: field 'prompt'"),
    ('{"prompt": "a", "output_len": 0}', "line 1: field 'output_len'"),
    ('{"prompt": "a", "output_len": "5"}', "line 1: field 'output_len'"),
    ('["a"]', "line 1: expected an object"),
])
def test_jsonl_errors(tmp_path, lines, needle):
    path = tmp_path / "p.jsonl"
    path.write_text(lines)
    with pytest.raises(UserError, match=needle):
        load_dataset(f"jsonl:{path}", 1)


@pytest.mark.parametrize(("spec", "needle"), [("foo", "use random, sharegpt:PATH or jsonl:PATH"),
                                              ("jsonl:", "not valid"), ("sharegpt:/no/such.json", "no such file")])
def test_parse_dataset_errors(spec, needle):
    with pytest.raises(UserError, match=needle):
        parse_dataset(spec)
