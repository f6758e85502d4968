"""`accelkit loadtest --structured-outputs`: every request carries the constraint, and each output is checked.

Against the real `accelkit serve` with a random tiny Llama (byte-level BPE, so it can be guided): the server masks
every token that would leave the match, so all outputs are valid whatever the model. Against servers that ignore
the constraint (raw SSE streams scripted here), the checker counts invalid and truncated outputs exactly."""

import json
import re
import subprocess
import sys

import pytest

from accelkit.loadtest import LoadTestConfig, run_loadtest
from accelkit.loadtest.structured import OutputConstraint, parse_constraint
from accelkit.results import ResultStore
from accelkit.serve.testing import save_bytelevel_model
from tests.conftest import REPO, run_cli
from tests.integration.loadtest_raw_sse import RawSSEServer, tokens
from tests.integration.serve_server_util import running_server

# bounded: every output ends well before max_tokens (256), so none is truncated
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 2},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "ok"],
    "additionalProperties": False,
}
REGEX = r"[0-9]{3}-[a-z]{2,4}( ok)?"
CHOICES = ("yes", "no", "maybe so")

CONSTRAINTS = {
    "json": OutputConstraint(kind="json", schema=SCHEMA),
    "regex": OutputConstraint(kind="regex", regex=REGEX),
    "choice": OutputConstraint(kind="choice", choices=CHOICES),
    "json_object": OutputConstraint(kind="json_object"),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model = save_bytelevel_model(tmp_path_factory.mktemp("structured-loadtest") / "m", seed=3)
    with running_server(str(model), max_model_len=512) as (url, _):
        yield url


def _config(url, **kw):
    return LoadTestConfig(**{"base_url": url, "model": "tiny", "num_prompts": 6, "random_input_len": 8,
                             "random_output_len": 256, "warmup": 1, "request_rate": 50.0, **kw})


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_every_kind_gives_all_valid_outputs_on_the_real_server(served, kind, endpoint):
    result = run_loadtest(_config(served, endpoint=endpoint, structured_outputs=CONSTRAINTS[kind]))
    p = result.details["passes"][0]
    assert p["completed"] == 6 and p["failed"] == 0, p["failures"]
    v = p["structured_outputs"]
    assert (v["checked"], v["valid"], v["invalid"], v["truncated"]) == (6, 6, 0, 0), v
    assert v["valid_share"] == 1.0 and v["invalid_examples"] == []
    assert all(r["validity"] == "valid" for r in p["requests"])
    assert result.details["curve"][0]["valid_share"] == 1.0
    # the usual metrics are all there beside the counts
    assert p["ttft_ms"]["n"] == 6 and p["output_throughput"] > 0
    expected = {("json", "chat"): "response_format.json_schema", ("json_object", "chat"): "response_format.json_object"}
    assert result.details["structured_outputs"]["sent_as"] == expected.get((kind, endpoint), f"structured_outputs.{kind}")
    json.dumps(result.to_dict(), allow_nan=False)


def test_older_guided_field_names_work_on_the_real_server(served):
    for kind in ("json", "regex", "choice"):
        result = run_loadtest(_config(served, num_prompts=3, structured_outputs=CONSTRAINTS[kind], guided_fields=True))
        assert result.details["structured_outputs"]["sent_as"] == f"guided_{kind}"
        assert result.details["passes"][0]["structured_outputs"]["valid"] == 3


def test_cli_json_schema_file_stores_the_counts_and_prints_them(served, tmp_path, _isolated_home):
    schema_file = tmp_path / "person.json"
    schema_file.write_text(json.dumps(SCHEMA))
    args = ["loadtest", "--base-url", served, "--model", "tiny", "--num-prompts", "5", "--random-input-len", "8",
            "--random-output-len", "256", "--structured-outputs", f"json:{schema_file}"]
    proc = run_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    v = doc["details"]["passes"][0]["structured_outputs"]
    assert (v["checked"], v["valid"], v["invalid"], v["truncated"], v["valid_share"]) == (5, 5, 0, 0, 1.0)
    with ResultStore(_isolated_home / "results.db") as store:
        stored = store.get(doc["result_id"]).result
    assert stored.details["passes"][0]["structured_outputs"]["valid"] == 5
    assert stored.details["config"]["structured_outputs"]["schema_path"] == str(schema_file)
    assert stored.details["config"]["structured_outputs"]["schema"] == SCHEMA
    text = run_cli(*args, "--no-save")
    assert text.returncode == 0, text.stderr
    assert re.search(r"valid outputs\s*│\s*5 ", text.stdout) and re.search(r"valid share\s*│\s*100\.0%", text.stdout)
    assert "sent as structured_outputs.json" in text.stdout


@pytest.mark.parametrize(("value", "words"), [
    ("yaml:x.yaml", "expected json:SCHEMA_FILE, regex:PATTERN, choice:A,B,C or json_object"),
    ("json:/nonexistent/schema.json", "cannot read the schema file"),
    ('json:{"type": "nope"}', "not a valid JSON schema"),
    ("json:FILE{'type': 'object'}", "the schema is not JSON"),
    ("json:FILE[1, 2]", "not an object"),
    ("regex:([a-z]", "does not compile"),
    ("choice:a,,b", "non-empty strings"),
    ("json_object:x", "takes no value"),
    ("json:/dev/null", "not a regular file"),  # a device is never read: /dev/zero would never end
    ("regex:\udcff", "UTF-8 cannot carry"),  # argv bytes that are not UTF-8: every request would fail to encode
])
def test_cli_bad_value_is_one_line_and_exit_2(value, words, tmp_path):
    if value.startswith("json:FILE"):  # a schema file holding the rest
        (tmp_path / "s.json").write_text(value.removeprefix("json:FILE"))
        value = f"json:{tmp_path / 's.json'}"
    proc = run_cli("loadtest", "--base-url", "http://127.0.0.1:9", "--model", "m", "--structured-outputs", value)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --structured-outputs") and words in lines[0], proc.stderr


def test_cli_refuses_ignore_eos_with_a_constraint():
    proc = run_cli("loadtest", "--base-url", "http://127.0.0.1:9", "--model", "m", "--structured-outputs",
                   "choice:yes,no", "--ignore-eos")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: --ignore-eos and --structured-outputs together"), proc.stderr


# ---- the checker against servers that ignore the constraint ---------------------------------------------------------


def test_an_unconstrained_server_is_counted_invalid():
    """A server that does not know the field streams what it likes (' t0 t1 t2 t3' here): every output invalid."""
    bodies = []

    def script(n, body, chat):
        bodies.append(body)
        return tokens(body, chat)

    with RawSSEServer(script) as raw:
        result = run_loadtest(_config(raw.base_url, model="m", random_output_len=4, warmup=0,
                                      structured_outputs=parse_constraint("regex:[0-9]+")))
    v = result.details["passes"][0]["structured_outputs"]
    assert (v["checked"], v["valid"], v["invalid"], v["truncated"], v["valid_share"]) == (6, 0, 6, 0, 0.0)
    assert v["invalid_examples"][0] == {"index": v["invalid_examples"][0]["index"],
                                        "reason": "does not match the regex", "text": " t0 t1 t2 t3"}
    assert all(b["structured_outputs"] == {"regex": "[0-9]+"} for b in bodies)


def _stream(text, finish_reason, chat):
    """One output chunk per character, the last carrying ``finish_reason``."""
    chunks = [{"choices": [{"index": 0, **({"delta": {"content": c}} if chat else {"text": c}),
                            "finish_reason": finish_reason if i == len(text) - 1 else None}]}
              for i, c in enumerate(text)]
    return [*chunks, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(text)}}]


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_valid_invalid_and_truncated_are_told_apart(endpoint):
    """Request i gets OUTPUTS[i % 6]: valid, valid, invalid (schema), invalid (not JSON), a JSON array, and one cut by
    max_tokens whose text happens to be complete (still truncated: the server did not finish it)."""
    outputs = [('{"name": "ab", "age": 3, "ok": true}', "stop"), ('{"name":"","age":0,"ok":false}', "stop"),
               ('{"name": "ab", "age": 300, "ok": true}', "stop"), ('{"name": "ab", "age', "stop"),
               ("[1]", "stop"), ('{"name": "ab", "age": 3, "ok": true}', "length")]
    bodies = []

    def script(n, body, chat):
        bodies.append(body)
        return _stream(*outputs[(n - 1) % len(outputs)], chat)

    with RawSSEServer(script) as raw:
        result = run_loadtest(_config(raw.base_url, model="m", endpoint=endpoint, warmup=0, max_concurrency=1,
                                      structured_outputs=CONSTRAINTS["json"]))
    p = result.details["passes"][0]
    v = p["structured_outputs"]
    assert (v["checked"], v["valid"], v["invalid"], v["truncated"]) == (6, 2, 3, 1), v
    assert v["valid_share"] == pytest.approx(2 / 6)
    assert [r["validity"] for r in p["requests"]] == ["valid", "valid", "invalid", "invalid", "invalid", "truncated"]
    reasons = [r["invalid_reason"] for r in p["requests"]]
    assert reasons[2] == "schema: 300 is greater than the maximum of 120 (at ['age'])"
    assert reasons[3].startswith("not JSON: ") and reasons[4].startswith("schema: [1] is not of type 'object'")
    if endpoint == "chat":
        assert bodies[0]["response_format"] == {"type": "json_schema",
                                                "json_schema": {"name": "accelkit_loadtest", "schema": SCHEMA}}
    else:
        assert bodies[0]["structured_outputs"] == {"json": SCHEMA}


def test_json_object_and_choice_checks():
    outputs = [('{"a": [1, {"b": null}]}', "json_object", "valid"), ("[1]", "json_object", "invalid"),
               ("yes", "choice", "valid"), ("yes ", "choice", "invalid")]
    for text, kind, validity in outputs:
        constraint = CONSTRAINTS[kind]
        with RawSSEServer(lambda n, body, chat, text=text: _stream(text, "stop", chat)) as raw:
            result = run_loadtest(_config(raw.base_url, model="m", num_prompts=2, warmup=0,
                                          structured_outputs=constraint))
        assert [r["validity"] for r in result.details["passes"][0]["requests"]] == [validity] * 2, (text, kind)


def test_no_constraint_leaves_results_as_before():
    """Without --structured-outputs nothing is checked and the stored shape is the old one (no new keys)."""
    with RawSSEServer(lambda n, body, chat: tokens(body, chat)) as raw:
        result = run_loadtest(_config(raw.base_url, model="m", random_output_len=3, warmup=0, num_prompts=2))
    p = result.details["passes"][0]
    assert "structured_outputs" not in p and "valid_share" not in result.details["curve"][0]
    assert result.details["structured_outputs"] is None and "validity" not in p["requests"][0]


def test_old_records_render(tmp_path):
    """A result stored before structured outputs (no such keys anywhere) still prints."""
    with RawSSEServer(lambda n, body, chat: tokens(body, chat)) as raw:
        result = run_loadtest(_config(raw.base_url, model="m", random_output_len=3, warmup=0, num_prompts=2,
                                      sweep_rates=(10.0, 20.0)))
    details = result.details
    del details["structured_outputs"]
    del details["config"]["structured_outputs"], details["config"]["guided_fields"]
    code = ("import json, sys; from accelkit.cli.loadtest import _render; _render(json.load(sys.stdin), None)")
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(details), capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Latency-throughput curve" in proc.stdout and "valid" not in proc.stdout
