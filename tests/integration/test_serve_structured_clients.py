"""Structured outputs as real clients ask for them: the official ``openai`` client's ``chat.completions.parse``
with a pydantic model (strict json_schema: additionalProperties false, every property required, nullable ones as
anyOf with null) against a real server on 127.0.0.1, and vLLM's other ways (guided_json as text, structured_outputs,
response_format json_schema not strict) with pydantic's own ``model_json_schema()``. The model is a random tiny
Llama with a byte-level BPE: every valid document is the mask's doing."""

from __future__ import annotations

import enum
import json
from typing import Literal

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from accelkit.serve.testing import save_bytelevel_model
from tests.integration.serve_server_util import running_server


class Size(enum.Enum):
    SMALL = "small"
    LARGE = "large"


class Part(BaseModel):
    name: str = Field(max_length=8, description="short name")
    count: int = Field(ge=0, le=500)


class Order(BaseModel):
    """An order, as an application declares it."""

    sku: str = Field(pattern=r"^[A-Z]{2}-[0-9]{3}$")
    size: Size
    rush: bool
    price: float = Field(gt=0, le=1000)
    parts: list[Part] = Field(max_length=2)
    note: str | None = Field(max_length=6)
    labels: dict[str, int] = Field(max_length=2)
    kind: Literal["retail", "bulk"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = save_bytelevel_model(tmp_path_factory.mktemp("clients") / "m", seed=5)
    with running_server(str(path), max_model_len=1024) as (url, _):
        yield url


def test_openai_client_parse_returns_the_pydantic_object(served):
    client = openai.OpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0, timeout=300)
    for seed in range(3):
        completion = client.chat.completions.parse(
            model="tiny", messages=[{"role": "user", "content": "an order"}], response_format=Order,
            max_tokens=600, seed=seed, temperature=1.0)
        message = completion.choices[0].message
        assert completion.choices[0].finish_reason == "stop"
        assert isinstance(message.parsed, Order), message
        assert message.parsed == Order.model_validate_json(message.content)


@pytest.mark.parametrize("way", ["guided_json_text", "structured_outputs", "response_format_not_strict"])
def test_vllm_ways_with_pydantics_schema(served, way):
    schema = Order.model_json_schema()
    body: dict[str, object] = {
        "guided_json_text": {"guided_json": json.dumps(schema)},
        "structured_outputs": {"structured_outputs": {"json": schema}},
        "response_format_not_strict": {"response_format": {"type": "json_schema", "json_schema": {
            "name": "order", "schema": schema, "strict": False}}},
    }[way]
    r = httpx.post(f"{served}/v1/chat/completions", timeout=300, json={
        "model": "tiny", "messages": [{"role": "user", "content": "an order"}], "max_tokens": 600, "seed": 11,
        **body})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    Order.model_validate_json(choice["message"]["content"])


def test_a_schema_we_cannot_honour_is_a_one_line_400(served):
    class Tagged(BaseModel):
        tags: set[int]  # uniqueItems: no regular language holds it

    client = openai.OpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.parse(model="tiny", messages=[{"role": "user", "content": "x"}],
                                      response_format=Tagged, max_tokens=8)
    error = info.value.body
    assert isinstance(error, dict) and error.get("param") == "response_format", error
    assert "uniqueItems" in error["message"] and "\n" not in error["message"]


def first_draws(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    out = {}
    for line in text.splitlines():
        if line.startswith("accelkit_structured_first_draws_total{"):
            out["allowed" if 'result="allowed"' in line else "refused"] = float(line.rsplit(" ", 1)[1])
    return out


def test_guided_tokens_drawn_before_their_mask_are_counted_on_metrics(served, monkeypatch):
    """Each guided token drawn before its mask is counted, as the grammar allowed or refused it (refused ones were
    drawn again, masked): at most one count per output token; both series exported from start-up. (No core spare,
    as on a CPU torch runs on every core of: the test workers run torch on fewer.)"""
    from accelkit.serve import structured
    from accelkit.serve.model_runner import ModelRunner

    monkeypatch.setattr(ModelRunner, "_spare_core", lambda self: False)
    monkeypatch.setattr(structured, "SAMPLE_FIRST_MIN_MASK_NS", 0)  # (the tiny vocabulary's masks are all cheap)
    before = first_draws(served)
    assert set(before) == {"allowed", "refused"}
    r = httpx.post(f"{served}/v1/completions", timeout=300, json={
        "model": "tiny", "prompt": "x", "max_tokens": 40, "temperature": 1.0,  # (no seed: a seeded row masks first)
        "structured_outputs": {"json": Part.model_json_schema()}})
    assert r.status_code == 200, r.text
    Part.model_validate_json(r.json()["choices"][0]["text"])
    after = first_draws(served)
    counted = sum(after.values()) - sum(before.values())
    assert 1 <= counted <= r.json()["usage"]["completion_tokens"], (before, after)
