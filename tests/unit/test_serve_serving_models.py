"""ServingModels: the served names, their cards, and the 404 for any other (no engine needed)."""

import pytest

from accelkit.serve.server.errors import APIError
from accelkit.serve.server.serving_models import ServingModels


def test_every_alias_is_listed_and_reports_the_first_name_as_root():
    models = ServingModels(("org/model", "alias"), created=123, max_model_len=2048)
    listed = models.list()
    assert listed["object"] == "list" and [m["id"] for m in listed["data"]] == ["org/model", "alias"]
    assert all(m["root"] == "org/model" and m["created"] == 123 and m["max_model_len"] == 2048 for m in listed["data"])
    assert models.retrieve("alias")["id"] == "alias"
    models.check(None)  # omitted: the served model
    models.check("alias")


def test_an_unknown_model_is_openais_404_naming_what_is_served():
    models = ServingModels(("tiny",), created=0, max_model_len=64)
    with pytest.raises(APIError) as err:
        models.retrieve("gpt-4")
    e = err.value
    assert (e.status, e.param, e.code, e.error_type) == (404, "model", "model_not_found", "invalid_request_error")
    assert "`gpt-4` does not exist" in e.message and "'tiny'" in e.message
