"""References between stored results: a bench's ``estimate_id``, a tune summary's ``result_ids`` — ids that must
follow when rows are copied into another store (``ResultStore.add_new``, a sweep collecting its points)."""

from __future__ import annotations

from typing import Any

#: keys of a result's details that hold another stored result's id (or a list of them)
REFERENCE_KEYS = ("estimate_id", "result_id", "result_ids")


def remap_ids(obj: Any, ids: dict[int, int], dangling: list[int] | None = None) -> Any:
    """``obj`` with every stored-id reference (:data:`REFERENCE_KEYS`) rewritten through ``ids`` (old → new): rows
    copied into another store get new ids, and what cites them must follow. An id not in ``ids`` stays — unless
    ``dangling`` is given: then it names no row that was copied (an import of a filtered export: the estimate stayed
    behind), so it is cleared (None; left out of a list) and appended to ``dangling``, rather than left pointing at
    whatever unrelated row holds that id in this store (found in review)."""
    def one(i: int) -> int | None:
        if i in ids or dangling is None:
            return ids.get(i, i)
        dangling.append(i)
        return None

    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if k in REFERENCE_KEYS and isinstance(v, int) and not isinstance(v, bool):
                out[k] = one(v)
            elif k in REFERENCE_KEYS and isinstance(v, list) and all(isinstance(i, int) for i in v):
                out[k] = [j for j in map(one, v) if j is not None]
            else:
                out[k] = remap_ids(v, ids, dangling)
        return out
    if isinstance(obj, list):
        return [remap_ids(v, ids, dangling) for v in obj]
    return obj
