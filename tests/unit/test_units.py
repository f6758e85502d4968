import pytest

from accelkit.core.units import GB, GiB, MiB, fmt_bytes, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("80GB", 80 * GB), ("16GiB", 16 * GiB), ("16G", 16 * GiB), ("512 MiB", 512 * MiB), ("1024", 1024),
     ("1.5GB", 1_500_000_000), (4096, 4096)],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "GB", "12 parsecs", "-5GB", -3])
def test_parse_size_rejects_with_the_field_name(bad):
    with pytest.raises(ValueError, match="--kv-cache-memory"):
        parse_size(bad, field="--kv-cache-memory")


def test_fmt_bytes_says_which_unit():
    assert fmt_bytes(GiB) == "1.00 GiB"
    assert fmt_bytes(GB, binary=False) == "1.00 GB"


def test_a_ratio_far_below_one_keeps_its_figures():
    """measured ÷ predicted of a tiny model on a CPU (0.00029) printed '0.00', read as 'measured nothing'."""
    from accelkit.bench.predict import explain
    from accelkit.core.units import fmt_ratio

    assert [fmt_ratio(r) for r in (1.234, 0.1, 0.0123, 0.00029)] == ["1.23", "0.10", "0.012", "0.00029"]
    line = explain(0.00029, 2.5e6, "tokens/s", None, None)
    assert line is not None and "= 0.00029 — 0.00029× the planner's figure" in line
