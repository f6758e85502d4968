"""OpenAI-style error objects: ``{"error": {"message", "type", "param", "code"}}`` with the right status."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "request_too_large"}
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
          500: "internal_error", 503: "service_unavailable"}


class APIError(Exception):
    """Raised inside a handler; becomes an OpenAI error response."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 error_type: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.error_type, self.headers = error_type, headers


def prompt_too_long(num_tokens: int, limit: int) -> str:
    """The 400 for a prompt that leaves no room for one output token, in OpenAI's and vLLM's words."""
    return (f"This model's maximum context length is {limit} tokens and your request has {num_tokens} input tokens "
            f"(the prompt plus at least one output token must fit); shorten the prompt to at most {limit - 1} tokens")


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None,
               error_type: str | None = None) -> dict[str, Any]:
    """``error_type`` when OpenAI's differs from the status's usual one (an unknown model is a 404 of type
    invalid_request_error)."""
    kind = error_type or _TYPES.get(status, "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(status: int, message: str, *, param: str | None = None, code: str | None = None,
                   error_type: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param=param, code=code, error_type=error_type),
                        status_code=status, headers=headers)


def http_error_response(status: int, method: str, path: str, detail: Any,
                        headers: dict[str, str] | None = None) -> JSONResponse:
    """Starlette's own HTTP errors (no route, a method the route does not take, …) as OpenAI error objects."""
    message = {404: f"no route {path}; see GET /v1/models and the POST /v1/* routes",
               405: f"{method} is not allowed on {path}"}.get(status, str(detail))
    return error_response(status, message, code=_HTTP_CODES.get(status), headers=headers)


def request_validation_response(errors: list[Any]) -> JSONResponse:
    """The 400 for FastAPI's RequestValidationError ``errors``: a body that is not JSON, not an object, or a field
    that does not validate (named as the param; the full path in the message)."""
    err = errors[0] if errors else {}
    loc = [x for x in err.get("loc", ()) if x != "body"]
    if err.get("type") == "json_invalid":
        return error_response(400, f"the request body is not valid JSON: {err.get('msg')}", code="invalid_json")
    if not loc and err.get("type") in ("model_attributes_type", "dict_type"):
        return error_response(400, "the request body must be a JSON object, sent with 'Content-Type: application/json'",
                              code="invalid_json")
    message, param = validation_message(errors or [{}])
    return error_response(400, message, param=param, code="invalid_value")


def validation_message(errors: list[Any]) -> tuple[str, str | None]:
    """(message, param) for pydantic's errors about the first field: pydantic's union-member tags (``str``,
    ``list[str]``, ``function-before[…]``, ``TextPart``) are dropped from the path, and of the union's members the
    ones that got furthest into the value speak — "stop: expected a valid string, or a valid list", not
    "stop.str: Input should be a valid string"; "messages.0.content.1.type: Input should be 'text'" for an image
    part, not "messages.0.content: Input should be a valid string"."""
    def path(err: Any) -> list[str]:
        return [str(x) for x in err.get("loc", ()) if x != "body" and not _is_union_tag(x)]

    def union(err: Any) -> list[str]:  # the path up to the first union tag: errors of one union share it
        loc = [x for x in err.get("loc", ()) if x != "body"]
        cut = next((i for i, x in enumerate(loc) if _is_union_tag(x)), len(loc))
        return [str(x) for x in loc[:cut]]

    members = [e for e in errors if union(e) == union(errors[0])]
    deepest = max(len(path(e)) for e in members)
    first = next(path(e) for e in members if len(path(e)) == deepest)
    msgs = list(dict.fromkeys(str(e.get("msg", "invalid value")) for e in members if path(e) == first))
    if len(msgs) > 1:
        text = "expected " + ", or ".join(m.removeprefix("Input should be ").removeprefix("Value error, ") for m in msgs)
    else:
        text = msgs[0].removeprefix("Value error, ")  # our validators' own sentences, as written
    return f"{'.'.join(first) or 'body'}: {text}", (first[0] if first else None)


def _is_union_tag(part: Any) -> bool:
    """pydantic names a union member in ``loc`` by its type: a builtin type name, a generic or validator form
    (``list[str]``, ``function-before[…]``), or a model class name. Request fields are snake_case and list
    indices are ints, so neither looks like one."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "dict", "list", "none")
                                      or any(c in part for c in "[-") or part[:1].isupper())
