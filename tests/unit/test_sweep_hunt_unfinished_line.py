"""The stop line of an interrupted sweep names the first unfinished points and counts the rest: a 10,000-point grid
stopped early printed all 9,967 of them on one ~430 KB stderr line."""

from __future__ import annotations

from accelkit.cli.sweep import unfinished_text


def test_a_long_unfinished_list_is_cut_and_counted() -> None:
    unfinished = [f"point {i} · llama-3-8b · bf16 · b1 · dp={i}" for i in range(33, 10_000)]
    text = unfinished_text(unfinished)
    assert text.startswith("point 33 · llama-3-8b · bf16 · b1 · dp=33, point 34 ")
    assert "point 42 · llama-3-8b · bf16 · b1 · dp=42 … and 9957 more (9967 in all;" in text
    assert "point 43 " not in text and len(text) < 600


def test_a_short_list_is_named_whole() -> None:
    assert unfinished_text([]) == "none"
    assert unfinished_text(["point 1 · a", "point 2 · b"]) == "point 1 · a, point 2 · b"
