"""What a variant's recipe did reaches the bench's result: ``accelkit.recipes.apply`` wrote one line per technique
(e.g. that int8 converted 23% of an MoE's matmul weights, its experts being 3-D parameters), and every workload
dropped them — a `--precision fp32,int8` run on Mixtral read as an int8 model."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")


def test_an_int8_moe_variant_says_how_much_it_converted(cli, probed):
    # the suite's stored probe (`probed`): no quick probe of its own for the MFU; short loops (the notes are the test)
    proc = cli("bench", "llm", "--model", "tiny-mixtral", "--batch-size", "1", "--prompt-len", "8",
               "--output-len", "4", "--precision", "fp32,int8", "--warmup", "1", "--warmup-time", "0",
               "--min-iterations", "2", "--min-time", "0", "--device", "cpu", "--no-predict", "--json", check=True)
    doc = json.loads(proc.stdout)
    entries = {(v["name"], v["step"]): v for v in doc["variants"]}
    assert entries[("fp32", "prefill")]["recipe_notes"] == []  # plain fp32: nothing applied, nothing said
    for step in ("prefill", "decode"):
        (note,) = entries[("int8", step)]["recipe_notes"]
        assert "int8 dynamic quantization" in note and "MixtralExperts" in note and "mostly not int8" in note
    (run_note,) = [n for n in doc["notes"] if n.startswith("int8: ")]  # once per variant, for the reader
    assert run_note == "int8: " + entries[("int8", "prefill")]["recipe_notes"][0]
    stored = json.loads(cli("results", "show", str(entries[("int8", "decode")]["result_id"]), "--json",
                            check=True).stdout)
    assert stored["details"]["recipe_notes"] == entries[("int8", "decode")]["recipe_notes"]
