"""A serving process's Python heap, out of the cyclic garbage collector's sight once it is built.

A full collection walks every object the collector tracks: 435,000 in what ``accelkit serve`` builds for the tiny
test model (torch, transformers, FastAPI, the engine), 214 ms a walk on this project's 2-core VM
(``benchmarks/gc_pause.py``) — the interpreter lock held all along, so the engine's step, the event loop and every
request stop with it. Python starts one whenever enough new objects have outlived two younger collections, which a
server under load reaches again and again (a profile of ``benchmarks/structured_hostile.py`` found the event loop
in such collections, set off while large JSON schemas became objects). Frozen (``gc.freeze``), the
objects of the start-up are never walked again; a full collection walks only what came after. vLLM
(``freeze_gc_heap`` after its warm-up) and SGLang (``freeze_gc``) do the same.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[int]:
    """Everything alive now frozen for the block (yields how many objects that is), then handed back to the
    collector. A collection first, so that no garbage is frozen with them: a frozen object is never freed, even
    once it is garbage, until the heap is unfrozen — hence the unfreeze after the block, for a process (a test's)
    that goes on once its server has stopped."""
    gc.collect()
    gc.freeze()
    try:
        yield gc.get_freeze_count()
    finally:
        gc.unfreeze()
