"""Datasets: random lengths, ShareGPT and JSONL parsing, errors that name the entry/line and field."""

import json
import random

import pytest

from accelkit.core import UserError
from accelkit.loadtest.datasets import load_dataset, parse_dataset, random_requests


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


def test_sharegpt(tmp_path):
    spec = _sharegpt(tmp_path, [
        {"id": "a", "conversations": [{"from": "human", "value": "Hello there, how are you?"},
                                      {"from": "gpt", "value": "x" * 40}]},
        {"id": "b", "conversations": [{"from": "human", "value": "only one turn"}]},  # skipped
        {"id": "c", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "hi"},
                                      {"from": "gpt", "value": "yo"}]},
    ])
    reqs, info = load_dataset(spec, 5, seed=0)
    assert info["num_available"] == 2 and info["oversampled"] and len(reqs) == 5
    by_prompt = {r.prompt: r for r in reqs}
    assert by_prompt["Hello there, how are you?"].output_len == 10  # 40 chars / 4
    assert by_prompt["hi"].output_len == 1


@pytest.mark.parametrize(("data", "needle"), [
    ({"conversations": []}, "expected a JSON list"),
    ([{"id": 1}], "entry 0 has no 'conversations'"),
    ([{"conversations": "hi"}], "entry 0 field 'conversations'"),
    ([{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt"}]}], r"entry 0 conversations\[1\]"),
    ([{"conversations": [{"from": "human", "value": "a"}]}], "no usable prompts"),
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
