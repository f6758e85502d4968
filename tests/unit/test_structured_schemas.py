"""JSON schemas as clients write them — pydantic's ``model_json_schema()`` and the openai client's strict form —
through the schema → regex translation: integer and number bounds checked exactly against Python's reading of
every text tried, and random walks through the real guide that must end in documents pydantic itself accepts."""

from __future__ import annotations

import datetime
import enum
import json
import random
import re
import uuid
from decimal import Decimal
from typing import Annotated, Literal

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

from accelkit.serve.sampling import StructuredOutputs
from accelkit.serve.structured_numbers import integer_range, number_range
from accelkit.serve.structured_patterns import regex_fsm, schema_to_regex
from tests.unit.test_structured import compiler, walk_schema


@pytest.mark.parametrize(("lo", "hi"), [(None, None), (0, None), (None, 0), (5, None), (None, -5), (-7, 7), (0, 150),
                                        (1, 1), (-1, -1), (0, 0), (-123, -45), (17, 2345), (99, 101), (100, 999),
                                        (-1000, 1000), (None, 1234), (-99, None), (10, 10**7), (3, 2)])
def test_integer_ranges_are_exact(lo: int | None, hi: int | None) -> None:
    regex = integer_range(lo, hi)
    if lo is not None and hi is not None and lo > hi:
        assert regex is None
        return
    assert regex is not None
    matcher = re.compile(regex)
    rng = random.Random(0)
    for n in [*range(-2500, 2500), *(rng.randint(-10**9, 10**9) for _ in range(2000))]:
        assert bool(matcher.fullmatch(str(n))) == ((lo is None or n >= lo) and (hi is None or n <= hi)), (n, regex)
    for text in ["-0", "00", "01", "-01", "+1", "", "1.0"]:
        assert not matcher.fullmatch(text)
    regex_fsm(regex)


BOUNDS = [0, 1, -1, 0.5, -0.5, 0.25, 1.75, -2.125, 10, 123.45, -99.9, 1e-7, 0.1, 0.3, 2**59 + 1, 7, 0.1000001, 0.0001,
          1.5000001, 1.05, 0.95, 0.0505, 2.00002]
NUMBER_TEXTS = ["0", "-0", "0.0", "-0.0", "1", "1.0", "0.5", "0.50", "0.49", "0.51", "1.7500", "1.75000001", "1.7499999",
                "10.0", "10.00001", "9.99999", "-2.125", "-2.1250", "-2.12500001", "-2.1249", "123.45", "123.4500001",
                "0.1", "0.10", "0.1000001", "0.10000009", "0.10000011", "0.0001", "0.00009", "1.5", "1.5000001",
                "1.05", "1.049", "0.05", "0.0505", "0.05049", "2.00002", "2.0000199", "0.10000000000000000001",
                "0.09999999999999999999", "0.30000000000000004", "0.29999999999999999", "0.0000001", "0.00000009",
                "576460752303423489", "576460752303423488.5", "576460752303423488", "7.000000000000001",
                "6.9999999999999999", "1e-7", "1E2"]
KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _keeps(value: float | int, keyword: str, bound: float | int) -> bool:
    return {"minimum": value >= bound, "maximum": value <= bound, "exclusiveMinimum": value > bound,
            "exclusiveMaximum": value < bound}[keyword]


@settings(max_examples=150, deadline=None)
@given(bounds=st.dictionaries(st.sampled_from(KEYWORDS), st.sampled_from(BOUNDS), min_size=1, max_size=2),
       seed=st.integers(0, 2**32 - 1))
def test_number_bounds_hold_for_what_json_reads(bounds: dict[str, float], seed: int) -> None:
    """A matched text keeps every bound as json.loads reads it (a double with a point, an exact int without); a
    refused one that keeps them exactly is a hair from a bound (a double would round it over) or a -0."""
    schema = {"type": "number", **bounds}
    lows = [v for k, v in bounds.items() if k.endswith("inimum")]
    highs = [v for k, v in bounds.items() if k.endswith("aximum")]
    try:
        regex = schema_to_regex(schema)
    except ValueError as exc:
        assert "no number lies within" in str(exc) and max(lows) >= min(highs)
        return
    matcher = re.compile(regex)
    rng = random.Random(seed)
    texts = [*NUMBER_TEXTS, *(("-" if rng.random() < 0.4 else "") + str(rng.randint(0, 200)) + (
        "." + "".join(rng.choices("0123456789", k=rng.randint(1, 6))) if rng.random() < 0.7 else "")
        for _ in range(300))]
    for text in texts:
        matched = bool(matcher.fullmatch(text))
        if matched:
            assert all(_keeps(json.loads(text), k, b) for k, b in bounds.items()), (schema, text)
        exact = Decimal(text)
        if not matched and all(_keeps(exact, k, Decimal(repr(float(b)))) for k, b in bounds.items()):
            near = any(abs(exact - Decimal(repr(float(b)))) <= abs(Decimal(repr(float(b)))) * Decimal("1e-15") + Decimal(
                "1e-300") and exact != Decimal(repr(float(b))) for b in bounds.values())
            assert near or (exact == 0 and text.startswith("-")) or "e" in text.lower(), (schema, text)
    regex_fsm(regex)


def test_number_range_edges() -> None:
    assert number_range(1.0, 0.0) is None
    positive = re.compile(schema_to_regex({"type": "number", "exclusiveMinimum": 0}))  # pydantic's PositiveFloat
    assert positive.fullmatch("0.5") and positive.fullmatch("3") and not positive.fullmatch("0.000")
    assert not positive.fullmatch("0") and not positive.fullmatch("-0.1")
    assert len(schema_to_regex({"type": "number", "exclusiveMinimum": 0})) < 200  # 5e-324's zeros are one run


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Address(BaseModel):
    """Where someone lives."""

    street: str = Field(description="Street and number", max_length=24)
    city: str = Field(min_length=1, max_length=12)
    zip: str | None = Field(None, pattern=r"^[0-9]{5}$")


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


class Person(BaseModel):
    """A person, as a client describes one."""

    name: str = Field(title="Full name", max_length=16)
    age: int = Field(ge=0, le=130)
    score: float = Field(ge=0, le=1, description="between 0 and 1")
    weight: float | None = Field(None, gt=0)
    color: Color
    level: Level = Level.LOW
    mood: Literal["calm", "busy"] = "calm"
    tags: list[str] = Field(default=[], max_length=3)
    counts: dict[str, int] = {}
    by_color: dict[Color, Annotated[int, Field(ge=0)]] = {}
    home: Address
    pet: Cat | Dog = Field(discriminator="kind")
    pair: tuple[int, str] | None = None
    born: datetime.date
    seen: datetime.datetime
    id: uuid.UUID


class Order(BaseModel):
    sku: str
    quantity: int = Field(gt=0, lt=100)
    price: float = Field(ge=0)
    ship_to: Address | None = None


SCHEMAS = {"person": Person.model_json_schema(), "person-strict": to_strict_json_schema(Person),
           "order-strict": to_strict_json_schema(Order)}
MODELS = {"person": Person, "person-strict": Person, "order-strict": Order}


@settings(max_examples=45, deadline=None)
@given(name=st.sampled_from(sorted(SCHEMAS)), seed=st.integers(0, 2**32 - 1), random_steps=st.integers(0, 40))
def test_pydantic_schemas_give_documents_pydantic_accepts(name: str, seed: int, random_steps: int) -> None:
    schema = SCHEMAS[name]
    text = walk_schema(schema, seed, random_steps)
    MODELS[name].model_validate_json(text)
    jsonschema.Draft202012Validator(schema).validate(json.loads(text))


@pytest.mark.parametrize(("schema", "message"), [
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "keyword 'uniqueItems' (at the root)"),
    ({"type": "string", "format": "duration"}, "format 'duration' (at the root) is not supported"),
    ({"type": "number", "minimum": 2, "maximum": 1}, "no number lies within minimum=2, maximum=1"),
    ({"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2}, "no integer lies within"),
    ({"type": "integer", "minimum": True}, "minimum (at the root) must be a number"),
    ({"type": "object", "propertyNames": {"type": "integer"}}, "propertyNames (at propertyNames) must allow strings"),
    ({"type": "object", "properties": {"a": {}}, "propertyNames": {"pattern": "^a$"}}, "propertyNames beside"),
    ({"type": "array", "prefixItems": [{}], "items": False, "minItems": 2}, "more than prefixItems holds"),
    ({"$defs": {"n": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}}}},
      "$ref": "#/$defs/n"}, "is recursive"),
])
def test_what_stays_refused_says_why_in_one_line(schema: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        compiler().compile(StructuredOutputs(json=json.dumps(schema)))
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["person", "order-strict"])
def test_the_indexed_crawl_builds_the_same_automaton_as_interegulars_own(name: str) -> None:
    import interegular
    import interegular.fsm

    from accelkit.serve import structured_patterns

    regex = schema_to_regex(SCHEMAS[name])
    regex_fsm("a")  # installs the indexed crawl
    assert interegular.fsm.crawl is structured_patterns._indexed_crawl
    fast = interegular.parse_pattern(regex).to_fsm()
    interegular.fsm.crawl = structured_patterns._ORIGINAL_CRAWL
    try:
        slow = interegular.parse_pattern(regex).to_fsm()
    finally:
        interegular.fsm.crawl = structured_patterns._indexed_crawl
    assert len(fast.states) > 100  # (a schema big enough to go through sets, dicts and unions of states)
    assert (fast.initial, fast.finals, fast.map) == (slow.initial, slow.finals, slow.map)
