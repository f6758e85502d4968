"""GET /v1/models and /v1/models/{id}: the names this server answers to, and the check every request's
``model`` field gets."""

from __future__ import annotations

import uuid
from typing import Any

from accelkit.serve.server.errors import APIError


class ServingModels:
    """The served names (``--served-model-name``, aliases after the first); every response reports the first,
    whichever alias the request used (as vLLM)."""

    def __init__(self, names: tuple[str, ...] | list[str], *, created: int, max_model_len: int) -> None:
        self.names = tuple(names)
        self.name = self.names[0]
        self.created, self.max_model_len = created, max_model_len

    def check(self, model_id: str | None) -> None:
        """404 (OpenAI's model_not_found) for a model this server does not serve; None is the served one."""
        if model_id is not None and model_id not in self.names:
            served = ", ".join(repr(n) for n in self.names)
            shown = model_id if len(model_id) <= 200 else f"{model_id[:200]}…"  # (a client's text: bounded)
            raise APIError(404, f"The model `{shown}` does not exist on this server; it serves {served} "
                           "(GET /v1/models)", param="model", code="model_not_found", error_type="invalid_request_error")

    def card(self, model_id: str) -> dict[str, Any]:
        # root is the first served name, not the weights' path as in vLLM: the path is the host's business
        # permission: vLLM's one entry, as OpenAI's legacy model object had it — typed clients (Java, Kotlin, Scala)
        # declare the list and fail to read a card without it (found by a hunt)
        return {"id": model_id, "object": "model", "created": self.created, "owned_by": "accelkit", "root": self.name,
                "parent": None, "max_model_len": self.max_model_len, "permission": [{
                    "id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": self.created,
                    "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                    "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False, "organization": "*",
                    "group": None, "is_blocking": False}]}

    def list(self) -> dict[str, Any]:
        """GET /v1/models."""
        return {"object": "list", "data": [self.card(n) for n in self.names]}

    def retrieve(self, model_id: str) -> dict[str, Any]:
        """GET /v1/models/{model_id}: its card, or the 404 of :meth:`check`."""
        self.check(model_id)
        return self.card(model_id)
