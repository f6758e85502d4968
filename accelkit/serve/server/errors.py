"""OpenAI-style error objects: ``{"error": {"message", "type", "param", "code"}}`` with the right status."""

from __future__ import annotations

from fastapi.responses import JSONResponse

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          429: "rate_limit_error", 500: "internal_error", 503: "service_unavailable"}


class APIError(Exception):
    """Raised inside a handler; becomes an OpenAI error response."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def error_response(status: int, message: str, *, param: str | None = None, code: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"), "param": param, "code": code}}
    return JSONResponse(body, status_code=status)
