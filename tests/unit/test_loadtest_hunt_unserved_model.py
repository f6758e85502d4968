"""`loadtest --model NAME` the server does not serve: every request failed with HTTP 404 and the run ended in
``error: warm-up: none of 1 requests … succeeded``, exit 1 (a runtime failure), or with --warmup 0 after a whole
pass. Now the 404 is checked against ``GET /v1/models``: one line naming the model and the names served, exit 2."""

import pytest

from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from tests.conftest import main_in_process


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.002, itl_s=0.001)) as fake:
        yield fake


def _run(capsys, server, model: str, *flags: str) -> tuple[int, str, str]:
    return main_in_process(capsys, "loadtest", "--base-url", server.base_url + "/v1", "--model", model,
                           "--num-prompts", "2", "--random-input-len", "4", "--random-output-len", "2",
                           "--no-save", "--no-progress", *flags)


@pytest.mark.parametrize("warmup", ["1", "0"])
def test_a_model_the_server_does_not_serve_is_one_line_exit_2(capsys, server, warmup):
    code, out, err = _run(capsys, server, "nope", "--warmup", warmup)
    assert code == 2 and out == ""
    assert err.strip() == (f"error: --model 'nope' is not served by {server.base_url} (HTTP 404): GET /v1/models "
                           "lists 'fake-model'; pass one of these names as --model")


def test_a_near_miss_is_named(capsys, server):
    code, _, err = _run(capsys, server, "Fake-Model", "--json")
    assert code == 2 and "did you mean 'fake-model'? pass one of these names as --model" in err


def test_the_served_model_still_runs(capsys, server):
    code, out, err = _run(capsys, server, "fake-model", "--json")
    assert code == 0, err
    assert '"completed": 2' in out


@pytest.mark.parametrize("config", [{"base_url": "http://127.0.0.1:8000", "model": "m"}, None])
def test_run_loadtest_names_a_config_that_is_not_one(config):
    from accelkit.loadtest import run_loadtest

    with pytest.raises(TypeError, match=r"^config=.* is not a LoadTestConfig; pass LoadTestConfig\(base_url="):
        run_loadtest(config)
