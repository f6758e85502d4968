"""A measurement the store refused is printed as JSON "rather than lost" — and `accelkit results import` must then take
that JSON as it is. It refused it (`record 0 has type=None; expected 'measurement' or 'estimate'`): the printed
document is the command's --json document (the Measurement, `result_id` and `store_error`), not an export record, so
the one way back into a store was a hand edit. The same for the --json document of a stored run, moved to another
machine's store."""

from __future__ import annotations

import json

import pytest

from accelkit.cli.store import print_unstored
from accelkit.core import AccelkitError
from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from tests.conftest import main_in_process


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.002, itl_s=0.001)) as fake:
        yield fake


def _loadtest_document(capsys, server) -> dict:
    """A real `accelkit loadtest --json --no-save` over HTTP: the document every store outcome builds on."""
    code, out, err = main_in_process(capsys, "loadtest", "--base-url", server.base_url, "--model", "fake-model",
                                     "--num-prompts", "3", "--random-input-len", "4", "--random-output-len", "3",
                                     "--sweep-rates", "100,inf", "--warmup", "0", "--no-save", "--no-progress", "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_json_of_an_unstored_loadtest_imports(capsys, server, tmp_path):
    document = _loadtest_document(capsys, server)
    with pytest.raises(AccelkitError) as refused:  # what `loadtest` prints when the store refuses the row
        print_unstored(document, "the results store … stayed locked by another process for 60 s", importable=True)
    printed = capsys.readouterr().out
    assert "`accelkit results import FILE` stores it later" in str(refused.value)
    saved = tmp_path / "unstored.json"
    saved.write_text(printed)
    assert json.loads(printed)["store_error"].startswith("the results store")

    code, out, err = main_in_process(capsys, "results", "import", str(saved), "--json")
    assert code == 0, err
    assert json.loads(out)["imported"] == 1
    code, out, err = main_in_process(capsys, "results", "show", "1", "--json")
    assert code == 0, err
    stored = json.loads(out)
    assert stored["type"] == "measurement" and stored["kind"] == "loadtest"
    for key in ("name", "throughput", "latency_s", "details", "samples", "environment", "created_at"):
        assert stored[key] == document[key], key

    code, out, err = main_in_process(capsys, "results", "import", str(saved), "--json")  # once only
    assert code == 0, err
    again = json.loads(out)
    assert (again["imported"], again["already_stored"]) == (0, 1)


def test_a_document_without_samples_is_still_refused(capsys, server, tmp_path):
    document = _loadtest_document(capsys, server)
    del document["samples"]
    saved = tmp_path / "doc.json"
    saved.write_text(json.dumps(document))
    code, out, err = main_in_process(capsys, "results", "import", str(saved))
    assert code == 2 and out == ""
    assert err.startswith(f"error: {saved}: record 0 has type=None; expected 'measurement' or 'estimate'")
