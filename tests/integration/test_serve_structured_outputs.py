"""Structured outputs (vLLM's choice, regex, JSON schema, JSON object) through the real engine, the offline API and
the HTTP server: a random tiny Llama — it knows nothing of JSON — with a byte-level BPE tokenizer, so every
character of a valid output is the mask's doing, and the text checked is what the engine's detokenizer printed."""

import json
import re
import uuid

import httpx
import pytest

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.sampling import StructuredOutputs
from accelkit.serve.testing import save_bytelevel_model, save_tiny_model
from tests.integration.serve_server_util import metric, running_server
from tests.unit.test_structured import CALL, split_calls

KV_BYTES = 8 * 2**20
SEEDS = range(6)
CHOICES = ("yes", "no", "maybe so", "日本")
REGEX = r"[0-9]{3}-[a-z]{2,4}( ok)?"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
        "note": {"type": ["string", "null"], "maxLength": 5},
    },
    "required": ["name", "age", "ok"],
}


def check_schema(doc: object) -> None:
    """What SCHEMA allows, checked field by field (the test's own reading of it, not the engine's)."""
    assert isinstance(doc, dict), doc
    assert set(doc) <= set(SCHEMA["properties"]) and {"name", "age", "ok"} <= set(doc), doc
    assert isinstance(doc["name"], str) and len(doc["name"]) <= 12, doc
    assert type(doc["age"]) is int and type(doc["ok"]) is bool, doc
    tags = doc.get("tags", [])
    assert isinstance(tags, list) and len(tags) <= 3 and set(tags) <= {"red", "green"}, doc
    assert doc.get("note") is None or (isinstance(doc["note"], str) and len(doc["note"]) <= 5), doc
    assert list(doc) == [k for k in SCHEMA["properties"] if k in doc], doc  # properties in the schema's order


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_bytelevel_model(tmp_path_factory.mktemp("structured") / "m", seed=3)


@pytest.fixture(scope="module", params=[False, True], ids=["serial", "overlapped-postprocess"])
def llm(model_dir, request):
    return LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_model_len=512, overlap_postprocess=request.param)


def generate(llm, spec: StructuredOutputs, max_tokens: int, **kwargs):
    """Greedy once and seeded sampling SEEDS times, in one batch (the guided rows beside each other)."""
    params = [SamplingParams.greedy(max_tokens, structured_outputs=spec, **kwargs)]
    params += [SamplingParams(temperature=1.0, seed=s, max_tokens=max_tokens, structured_outputs=spec, **kwargs)
               for s in SEEDS]
    return llm.generate(["the answer:"] * len(params), params)


def test_choice_gives_exactly_one_of_the_choices(llm):
    outs = generate(llm, StructuredOutputs(choice=list(CHOICES)), 16)
    for out in outs:
        assert out.text in CHOICES and out.finish_reason == "stop", out
    assert len({o.text for o in outs}) > 1  # sampling really picks among them (not one forced path)


def test_regex_output_matches_it_whole(llm):
    outs = generate(llm, StructuredOutputs(regex=REGEX), 24)
    for out in outs:
        assert re.fullmatch(REGEX, out.text) and out.finish_reason == "stop", out


def test_json_schema_output_parses_and_is_valid(llm):
    outs = generate(llm, StructuredOutputs(json=SCHEMA), 256)
    for out in outs:
        assert out.finish_reason == "stop", out
        check_schema(json.loads(out.text))


def test_json_object_output_is_one_json_object(llm):
    outs = generate(llm, StructuredOutputs(json_object=True), 256)
    stopped = [o for o in outs if o.finish_reason == "stop"]
    assert stopped  # a random model still closes its objects: the mask leaves it nothing else in the end
    for out in stopped:
        assert isinstance(json.loads(out.text), dict), out
    for out in outs:  # one cut off by max_tokens is still an object's beginning
        assert out.text.lstrip().startswith("{"), out


def test_unguided_rows_in_the_same_batch_are_unchanged(llm):
    prompt = "the answer:"
    plain = llm.generate(prompt, SamplingParams.greedy(12, ignore_eos=True))[0]
    mixed = llm.generate([prompt, prompt], [SamplingParams.greedy(12, ignore_eos=True),
                                            SamplingParams.greedy(12, structured_outputs=StructuredOutputs(regex="a+"))])
    assert mixed[0].token_ids == plain.token_ids
    assert re.fullmatch("a+", mixed[1].text)


def test_with_ignore_eos_a_complete_match_is_followed_by_eos_only(llm):
    out = llm.generate("x", SamplingParams.greedy(8, ignore_eos=True,
                                                  structured_outputs=StructuredOutputs(choice=["no"])))[0]
    eos = llm.engine.eos_token_ids
    first_eos = next(i for i, t in enumerate(out.token_ids) if t in eos)
    assert out.text == "no" and all(t in eos for t in out.token_ids[first_eos:]) and len(out.token_ids) == 8


def test_a_stop_string_still_ends_a_guided_output(llm):
    out = llm.generate("x", SamplingParams.greedy(24, stop=["-"], structured_outputs=StructuredOutputs(regex=REGEX)))[0]
    assert re.fullmatch("[0-9]{3}", out.text) and out.finish_reason == "stop"


def test_bad_specs_and_combinations_are_refused_before_queueing(llm, tmp_path):
    engine = llm.engine
    bad = [
        (dict(regex="(?<=a)b"), "regex"),
        (dict(json={"type": "array", "uniqueItems": True}), r"keyword uniqueItems \(at the root\) cannot be enforced"),
        (dict(regex="[^\\x00-\\U0010ffff]"), "no text matches it"),
        (dict(json={"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}), "missing"),
    ]
    for fields, words in bad:
        with pytest.raises(ValueError, match=words):
            engine.add_request("x", SamplingParams.greedy(4, structured_outputs=StructuredOutputs(**fields)))
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams.greedy(4, min_tokens=2, structured_outputs=StructuredOutputs(regex="a+"))
    with pytest.raises(ValueError, match="allowed_token_ids"):
        SamplingParams.greedy(4, allowed_token_ids=(5,), structured_outputs=StructuredOutputs(regex="a+"))
    assert not engine.has_unfinished_requests()
    word_level = LLM(str(save_tiny_model(tmp_path / "wl")), kv_cache_memory_bytes=KV_BYTES, max_model_len=64)
    with pytest.raises(ValueError, match="byte-level BPE or SentencePiece"):
        word_level.generate("w5", SamplingParams.greedy(4, structured_outputs=StructuredOutputs(regex="a+")))


# ---- over HTTP ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(model_dir):
    with running_server(str(model_dir), max_model_len=512) as (url, _):
        yield url


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/{path}", json={"model": "tiny", **body}, timeout=120)


def test_http_chat_json_schema_and_json_object(served):
    for seed in range(3):
        r = post(served, "chat/completions", {
            "messages": [{"role": "user", "content": "a person"}], "max_tokens": 256, "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}},
        })
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop"
        check_schema(json.loads(choice["message"]["content"]))
    r = post(served, "chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 256,
                                          "seed": 1, "response_format": {"type": "json_object"}, "n": 3})
    assert r.status_code == 200, r.text
    for choice in r.json()["choices"]:
        if choice["finish_reason"] == "stop":
            assert isinstance(json.loads(choice["message"]["content"]), dict)


def test_http_completions_vllm_fields(served):
    r = post(served, "completions", {"prompt": "pick:", "max_tokens": 16, "guided_choice": list(CHOICES), "n": 4,
                                     "seed": 2})
    assert r.status_code == 200, r.text
    assert all(c["text"] in CHOICES for c in r.json()["choices"])
    r = post(served, "completions", {"prompt": "code:", "max_tokens": 24, "temperature": 0,
                                     "structured_outputs": {"regex": REGEX}})
    assert r.status_code == 200, r.text
    assert re.fullmatch(REGEX, r.json()["choices"][0]["text"])
    r = post(served, "completions", {"prompt": "p:", "max_tokens": 256, "seed": 4, "guided_json": json.dumps(SCHEMA)})
    assert r.status_code == 200, r.text
    check_schema(json.loads(r.json()["choices"][0]["text"]))


def test_http_compact_json_and_a_whitespace_pattern(served):
    """vLLM's disable_any_whitespace and (guided_)whitespace_pattern over HTTP: compact JSON has no whitespace outside
    its strings; a pattern of one optional newline allows nothing else between tokens."""
    strings = re.compile(r'"(?:[^"\\]|\\.)*"')
    for seed in range(3):
        r = post(served, "completions", {"prompt": "p:", "max_tokens": 256, "seed": seed,
                                         "structured_outputs": {"json": SCHEMA, "disable_any_whitespace": True}})
        assert r.status_code == 200, r.text
        text = r.json()["choices"][0]["text"]
        check_schema(json.loads(text))
        assert not re.search(r"\s", strings.sub("\"\"", text)), text
        r = post(served, "chat/completions", {
            "messages": [{"role": "user", "content": "a person"}], "max_tokens": 256, "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}},
            "guided_whitespace_pattern": r"\n?"})
        assert r.status_code == 200, r.text
        text = r.json()["choices"][0]["message"]["content"]
        check_schema(json.loads(text))
        assert not re.search(r"[ \t\r]|\n\n", strings.sub("\"\"", text)), text
        # a structured_outputs that holds only a whitespace setting shapes the field that asks
        r = post(served, "chat/completions", {
            "messages": [{"role": "user", "content": "a person"}], "max_tokens": 256, "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}},
            "structured_outputs": {"disable_any_whitespace": True}})
        assert r.status_code == 200, r.text
        text = r.json()["choices"][0]["message"]["content"]
        check_schema(json.loads(text))
        assert not re.search(r"\s", strings.sub("\"\"", text)), text


def test_http_compiles_reuse_and_the_grammar_cache_are_on_metrics(served):
    def read(name: str, label: str = "") -> float:
        return metric(served, f'accelkit_structured_{name}{{model_name="tiny"{label}}}')

    names = [("compiles_total", ',result="compiled"'), ("compiles_total", ',result="refused"'),
             ("specs_reused_total", ',source="cached"'), ("compile_seconds_count", "")]
    before = [read(*n) for n in names]
    nonce = uuid.uuid4().hex
    for _ in range(2):  # compiled, then found compiled
        r = post(served, "completions", {"prompt": "p:", "max_tokens": 4, "guided_regex": f"{nonce}[0-9]+"})
        assert r.status_code == 200, r.text
    for _ in range(2):  # refused (look-around), then found refused
        r = post(served, "completions", {"prompt": "p:", "max_tokens": 4, "guided_regex": f"(?={nonce}){nonce}"})
        assert r.status_code == 400, r.text
    assert [read(*n) - b for n, b in zip(names, before, strict=True)] == [1, 1, 2, 2]
    assert read("grammar_cache_bytes") > 0
    assert read("compile_timeouts_total") == 0


def test_http_streamed_deltas_join_to_a_valid_output(served):
    with httpx.stream("POST", f"{served}/v1/completions", timeout=120, json={
        "model": "tiny", "prompt": "p:", "max_tokens": 256, "seed": 7, "stream": True,
        "structured_outputs": {"json": SCHEMA},
    }) as r:
        assert r.status_code == 200
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    text = "".join(c["text"] for chunk in map(json.loads, lines) for c in chunk["choices"])
    check_schema(json.loads(text))


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"guided_choice": ["a"], "guided_regex": "b"}, "guided_choice", "send only one"),
    ({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}}, "structured_outputs",
     "send only one"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one"),
    ({"structured_outputs": {"grammar": "start: x"}}, "structured_outputs", "structured_outputs.grammar"),
    ({"guided_grammar": "start: 'a' |"}, "guided_grammar", "guided_grammar"),
    ({"guided_json": {"type": "array", "uniqueItems": True}}, "guided_json", "uniqueItems"),
    ({"guided_json": '{"enum": [NaN]}'}, "guided_json", "NaN"),
    ({"guided_regex": "(a"}, "guided_regex", "guided_regex"),
    ({"guided_choice": []}, "guided_choice", "guided_choice"),
    ({"response_format": {"type": "json_schema"}}, "response_format", "json_schema.schema"),
    ({"response_format": {"type": "xml"}}, "response_format", "xml"),
    ({"response_format": {"type": "structural_tag"}}, "response_format", "non-empty list of structures"),
    ({"structured_outputs": {"structural_tag": {"structures": [{"begin": "x", "schema": {}, "end": ""}],
                                                "triggers": ["<f"]}}}, "structured_outputs", "none of the triggers"),
    ({"structured_outputs": {"structural_tag": {"structures": [{"begin": "<f", "schema": {"not": {}}, "end": ""}],
                                                "triggers": ["<f"]}}}, "structured_outputs", "structural_tag"),
    ({"guided_regex": "a+", "min_tokens": 2}, "min_tokens", "min_tokens"),
    ({"guided_json": SCHEMA, "guided_whitespace_pattern": "x*"}, "guided_whitespace_pattern",
     "may match more than JSON's whitespace"),
    ({"guided_whitespace_pattern": " "}, "guided_whitespace_pattern", "no field asks for one"),
    ({"structured_outputs": {"regex": "a", "disable_any_whitespace": True}}, "structured_outputs",
     "applies to JSON outputs"),
    ({"structured_outputs": {"json": SCHEMA}, "guided_whitespace_pattern": "x"}, "guided_whitespace_pattern",
     "guided_whitespace_pattern 'x'"),
    ({"response_format": {"type": "json_object"}, "structured_outputs": {"whitespace_pattern": "."}},
     "structured_outputs", "structured_outputs.whitespace_pattern '.'"),
    ({"guided_json": SCHEMA, "guided_whitespace_pattern": " {0,4294967295}"}, "guided_whitespace_pattern",
     "may match more than JSON's whitespace"),
])
def test_http_bad_structured_requests_are_400s_naming_the_field(served, body, param, words):
    r = post(served, "completions", {"prompt": "p:", "max_tokens": 4, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error
    ok = post(served, "completions", {"prompt": "p:", "max_tokens": 4})  # nothing else was hurt
    assert ok.status_code == 200


GRAMMAR = """
start: item ("," item)*
item: NUMBER | WORD
NUMBER: /[0-9]{1,3}/
WORD: "yes" | "no"
"""


# vLLM's structural tag: free text, in which the trigger ("a", frequent in a random model's text) begins a call whose
# arguments are one JSON document valid under the schema, then its end
TAG = {"structures": [{"begin": "a=", "schema": CALL, "end": ";"}], "triggers": ["a"]}


def check_calls(text: str, finish_reason: str) -> int:
    """Every trigger in ``text`` begins a whole call (the last may be cut by max_tokens); returns how many."""
    docs, _ = split_calls(text, "a", "a=", ";", cut_short=finish_reason == "length")
    assert all(list(doc) == ["n"] and type(doc["n"]) is int for doc in docs), text
    return len(docs)


def test_structural_tag_text_is_free_and_each_trigger_begins_a_valid_call(llm):
    outs = generate(llm, StructuredOutputs(structural_tag=TAG), 128)
    assert sum(check_calls(out.text, out.finish_reason) for out in outs) >= 1, outs  # the trigger is written
    assert any(re.sub(r"a=[^;]*;", "", out.text) for out in outs)  # and free text around it


def test_http_structural_tag_as_response_format_and_as_structured_outputs(served):
    for body in ({"response_format": {"type": "structural_tag", **TAG}},
                 {"structured_outputs": {"structural_tag": json.dumps(TAG)}}):
        r = post(served, "completions", {"prompt": "p:", "max_tokens": 96, "seed": 3, "temperature": 1.0, **body})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        check_calls(choice["text"], choice["finish_reason"])


def test_a_lark_grammar_and_different_specs_share_one_batch(llm):
    specs = [StructuredOutputs(grammar=GRAMMAR), StructuredOutputs(regex=REGEX), StructuredOutputs(choice=list(CHOICES)),
             StructuredOutputs(grammar=GRAMMAR)]
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=24, structured_outputs=spec)
              for s, spec in enumerate(specs)]
    outs = llm.generate(["x"] * len(specs), params)  # one batch: one bitmask, each row its own grammar
    grammar_item = "([0-9]{1,3}|yes|no)"
    for out, pattern in zip(outs, [f"{grammar_item}(,{grammar_item})*", REGEX, "|".join(CHOICES), None], strict=True):
        if pattern is not None and out.finish_reason == "stop":
            assert re.fullmatch(pattern, out.text), out
    assert outs[0].text.split(",")[0] and re.match(grammar_item, outs[3].text), outs


def test_masks_filled_beside_the_forward_give_the_same_tokens_as_filled_after_it(llm, monkeypatch):
    """Where a core is spare (an accelerator, or a CPU torch leaves a core of), the guided rows' masks are filled on
    a helper thread while the forward runs; the tokens must be those of the masks filled after it, in one batch
    with unguided rows, for every kind of spec (masks first in both: a draw before the mask gives other tokens from
    the same distribution)."""
    from accelkit.serve.model_runner import ModelRunner

    monkeypatch.setattr(llm.engine.runner.sampler, "draw_first", False)
    specs = [StructuredOutputs(grammar=GRAMMAR), StructuredOutputs(json=json.dumps(SCHEMA)),
             StructuredOutputs(choice=list(CHOICES)), None, StructuredOutputs(regex=REGEX)]
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=40, structured_outputs=spec)
              for s, spec in enumerate(specs)]
    started = []
    start_guides = llm.engine.runner.sampler.start_guides
    monkeypatch.setattr(llm.engine.runner.sampler, "start_guides",
                        lambda *a: (started.append(1), start_guides(*a)))
    runs = {}
    for spare in (True, False):
        monkeypatch.setattr(ModelRunner, "_spare_core", lambda self, spare=spare: spare)
        started.clear()
        waited = llm.engine.get_stats().mask_wait_seconds
        runs[spare] = llm.generate(["x"] * len(specs), params)
        assert bool(started) is spare
        # the engine thread's wait for those masks is counted (accelkit_structured_mask_wait_seconds), only theirs
        assert (llm.engine.get_stats().mask_wait_seconds > waited) is spare
    assert [(o.token_ids, o.finish_reason) for o in runs[True]] == [(o.token_ids, o.finish_reason) for o in runs[False]]
    schema_row = runs[True][1]
    if schema_row.finish_reason == "stop":
        check_schema(json.loads(schema_row.text))
    assert re.fullmatch("|".join(CHOICES), runs[True][2].text) or runs[True][2].finish_reason == "length"


def test_greedy_guided_rows_drawn_before_their_masks_give_the_tokens_of_masking_first(llm, monkeypatch):
    """A greedy row's argmax, when its grammar allows it, is its masked argmax: drawing first (checking, masking and
    drawing again only when refused) gives the very tokens of masking first, step after step, for every kind of
    spec in one batch with an unguided row (no core spare: masks filled beside the forward are not drawn first)."""
    from accelkit.serve import structured
    from accelkit.serve.model_runner import ModelRunner

    monkeypatch.setattr(ModelRunner, "_spare_core", lambda self: False)
    monkeypatch.setattr(structured, "SAMPLE_FIRST_MIN_MASK_NS", 0)  # (the tiny vocabulary's masks are all cheap)
    specs = [StructuredOutputs(grammar=GRAMMAR), StructuredOutputs(json=json.dumps(SCHEMA)),
             StructuredOutputs(choice=list(CHOICES)), None, StructuredOutputs(regex=REGEX)]
    params = [SamplingParams.greedy(max_tokens=40, structured_outputs=spec) for spec in specs]
    sampler = llm.engine.runner.sampler
    runs = {}
    for first in (False, True):
        monkeypatch.setattr(sampler, "draw_first", first)
        before = sampler.first_draws_allowed + sampler.first_draws_refused
        runs[first] = [(o.token_ids, o.finish_reason) for o in llm.generate(["x"] * len(specs), params)]
        assert (sampler.first_draws_allowed + sampler.first_draws_refused > before) is first
    assert runs[True] == runs[False]


def test_structured_outputs_draw_first_off_masks_every_guided_row_first(model_dir, monkeypatch):
    """``structured_outputs_draw_first=False`` (``--no-structured-outputs-draw-first``) reaches the sampler: no
    guided row is drawn before its mask, and the outputs still keep to their regex."""
    from accelkit.serve.model_runner import ModelRunner

    monkeypatch.setattr(ModelRunner, "_spare_core", lambda self: False)
    off = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_model_len=512, structured_outputs_draw_first=False)
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=40, structured_outputs=StructuredOutputs(regex=REGEX))
              for s in range(4)]
    outs = off.generate(["x"] * len(params), params)
    sampler = off.engine.runner.sampler
    assert not sampler.draw_first and sampler.first_draws_allowed == sampler.first_draws_refused == 0
    assert all(re.fullmatch(REGEX, o.text) for o in outs if o.finish_reason == "stop"), outs


def test_a_constraint_after_a_token_leaves_the_text_before_it_free(llm):
    """structured_outputs_after_token_id (a reasoning model's </think>, under --reasoning-parser): the tokens up to
    and including its first occurrence are drawn unguided, everything after matches the spec whole."""
    tok = llm.engine.tokenizer
    wake = tok.convert_tokens_to_ids(tok.tokenize(" the")[0])
    eos = llm.engine.eos_token_ids
    spec = StructuredOutputs(regex="[0-9]{3}")
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=200, structured_outputs=spec,
                             structured_outputs_after_token_id=wake,
                             logit_bias={wake: 4.0, **{e: -100.0 for e in eos}}) for s in SEEDS]
    free = ""
    for out in llm.generate(["the answer:"] * len(params), params):
        ids = out.outputs[0].token_ids
        assert wake in ids, out
        at = ids.index(wake)
        assert re.fullmatch("[0-9]{3}", tok.decode(ids[at + 1:], skip_special_tokens=True)), out
        free += tok.decode(ids[:at])
    assert re.search("[^0-9]", free), free  # (before the token the mask was off: the random model's own text)
    with pytest.raises(ValueError, match="needs structured_outputs"):
        SamplingParams.greedy(4, structured_outputs_after_token_id=wake)
    with pytest.raises(ValueError, match="structured_outputs_after_token_id has the token id 99999"):
        llm.engine.add_request("x", SamplingParams.greedy(4, structured_outputs=spec,
                                                           structured_outputs_after_token_id=99999))


def test_a_deferring_first_token_puts_the_constraint_off_until_the_closing_one(llm):
    """structured_outputs_deferred_by_token_id (a hybrid reasoning model's <think>, under --reasoning-parser qwen3):
    the first token may be that one besides what the spec allows — then the output is free up to the closing token
    and matches the spec after it — or any the spec allows, and then the spec holds from the first token."""
    tok = llm.engine.tokenizer
    opener, closer = (tok.convert_tokens_to_ids(tok.tokenize(w)[0]) for w in ("Q", " "))
    eos = llm.engine.eos_token_ids
    spec = StructuredOutputs(regex="[0-9]{3}")

    def outputs(bias: dict[int, float]) -> list[list[int]]:
        params = [SamplingParams(temperature=1.0, seed=s, max_tokens=200, structured_outputs=spec,
                                 structured_outputs_after_token_id=closer,
                                 structured_outputs_deferred_by_token_id=opener,
                                 logit_bias={**bias, **{e: -100.0 for e in eos}}) for s in SEEDS]
        return [list(out.outputs[0].token_ids) for out in llm.generate(["the answer:"] * len(params), params)]

    free = ""
    for ids in outputs({opener: 8.0, closer: 6.0}):  # the opener first (its bias): free text, then the spec
        assert ids[0] == opener and closer in ids, ids
        at = ids.index(closer)
        assert re.fullmatch("[0-9]{3}", tok.decode(ids[at + 1:], skip_special_tokens=True)), ids
        free += tok.decode(ids[1:at])
    assert re.search("[^0-9]", free), free  # (between them the mask was off: the random model's own text)
    for ids in outputs({opener: -100.0, closer: 4.0}):  # anything else first: the spec from there on, whole
        assert re.fullmatch("[0-9]{3}", tok.decode(ids, skip_special_tokens=True)), ids
    with pytest.raises(ValueError, match="needs a different structured_outputs_after_token_id"):
        SamplingParams.greedy(4, structured_outputs=spec, structured_outputs_deferred_by_token_id=opener)
    with pytest.raises(ValueError, match="structured_outputs_deferred_by_token_id has the token id 99999"):
        llm.engine.add_request("x", SamplingParams.greedy(4, structured_outputs=spec,
                                                           structured_outputs_after_token_id=closer,
                                                           structured_outputs_deferred_by_token_id=99999))
