"""`accelkit loadtest --base-url http://HOST:PORT/v1/completions` (a vLLM user's full endpoint URL) sent every request
to /v1/completions/v1/completions: a 404 at warm-up, exit 1. As `vllm bench serve --base-url` (the server root, the
path being --endpoint's), the base URL is the root: one ending in an endpoint's path is refused before anything is
sent, exit 2, naming the root to give (and --endpoint chat for the chat path)."""

from __future__ import annotations

import pytest

from accelkit.loadtest.config import LoadTestConfig
from tests.unit.cli_refusal_util import one_error

RUN = ("--model", "m", "--num-prompts", "1", "--warmup", "0", "--no-save")


def test_the_reported_case_is_refused_naming_the_root(cli):
    # (nothing listens on port 9: without the refusal the run failed there, exit 1)
    assert one_error(cli("loadtest", "--base-url", "http://127.0.0.1:9/v1/completions", *RUN)) == \
        "error: --base-url 'http://127.0.0.1:9/v1/completions' ends in the endpoint path /v1/completions, which " \
        "loadtest adds itself: give the server root 'http://127.0.0.1:9' (as vllm bench serve's --base-url)"


@pytest.mark.parametrize(("url", "root", "endpoint"), [
    ("http://127.0.0.1:8000/v1/chat/completions/", "http://127.0.0.1:8000", " with --endpoint chat"),
    ("https://gw.example/llm/V1/Completions", "https://gw.example/llm", ""),
])
def test_any_endpoint_path_is_refused(url, root, endpoint):
    with pytest.raises(ValueError, match="ends in the endpoint path") as info:
        LoadTestConfig(base_url=url, model="m")
    assert f"give the server root {root!r}{endpoint} (" in str(info.value)


def test_a_root_and_a_trailing_v1_still_work():
    assert LoadTestConfig(base_url="http://h:8000/v1/", model="m").url == "http://h:8000/v1/completions"
    assert LoadTestConfig(base_url="http://h/proxy", model="m", endpoint="chat").url == \
        "http://h/proxy/v1/chat/completions"
