"""One tiny engine loop behind the serving classes' tests (no HTTP): built once per test process, shared by
every test module that asks for it (each test's requests finish or are aborted before it returns)."""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from accelkit.monitor.serving import ServingMetrics
from accelkit.serve.config import EngineConfig, ServerConfig
from accelkit.serve.engine import LLMEngine
from accelkit.serve.loop import EngineLoop
from accelkit.serve.server.serving_models import ServingModels
from accelkit.serve.server.state import ServingState
from accelkit.serve.testing import save_tiny_model

T = TypeVar("T")
MAX_NUM_SEQS = 4
MAX_QUEUE = 4


@functools.cache
def serving_state() -> ServingState:
    """A started engine loop over a random-init tiny Llama (its word-level tokenizer has a chat template)."""
    root = Path(tempfile.mkdtemp(prefix="accelkit-serving-"))
    model_dir = save_tiny_model(root / "tiny")
    engine = LLMEngine(EngineConfig(model=str(model_dir), kv_cache_memory_bytes=4 << 20, max_model_len=256,
                                    max_num_seqs=MAX_NUM_SEQS))
    loop = EngineLoop(engine)
    state = ServingState(loop, ServerConfig(served_model_name="tiny", served_model_aliases=("alias",),
                                            max_queue=MAX_QUEUE), ServingMetrics.get(CollectorRegistry()))
    loop.on_step = state.bridge.on_step
    loop.start()

    def stop() -> None:
        loop.stop(timeout=10)
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(stop)
    return state


def models(state: ServingState) -> ServingModels:
    return ServingModels(state.config.model_names, created=state.created, max_model_len=state.engine.max_model_len)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def events(stream: AsyncIterator[str]) -> list[Any]:
    """A stream's SSE events: each ``data:`` payload parsed as JSON, ``[DONE]`` kept as the string."""
    out = []
    async for event in stream:
        assert event.startswith("data: ") and event.endswith("\n\n"), event
        payload = event[len("data: "):-2]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def settled(state: ServingState, timeout_s: float = 30.0) -> bool:
    """Nothing of a test left behind — no engine request, no admission slot, every KV block free — once the engine
    thread has taken the aborts in (within ``timeout_s``)."""
    engine = state.engine
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (not engine.has_unfinished_requests() and state.admission.in_flight == 0
                and engine.block_manager.num_free_blocks == engine.block_manager.num_blocks):
            return True
        time.sleep(0.01)
    return False
