"""The random dataset's size cap: its error names the product it really computed.

docs/loadtest.md caps the random prompts at 200 M words; the check counts the warm-up's prompts and the longest
length ``--random-range-ratio`` allows, but its message called that number "num_prompts × random_input_len",
so ``--num-prompts 200000 --random-input-len 1000`` read "num_prompts × random_input_len = 200,001,000".
"""

from __future__ import annotations

import pytest

from accelkit.loadtest import LoadTestConfig


@pytest.mark.parametrize(("kwargs", "product", "words"), [
    ({"num_prompts": 200_000, "random_input_len": 1000}, "(num_prompts=200000 + warmup=1)", "200,001,000"),
    ({"num_prompts": 150_000, "random_input_len": 1000, "random_range_ratio": 0.5, "warmup": 0},
     "(num_prompts=150000 + warmup=0) × random_input_len=1000 × (1 + random_range_ratio=0.5)", "225,000,000"),
])
def test_words_cap_message_names_what_it_counted(kwargs, product, words):
    with pytest.raises(ValueError) as e:
        LoadTestConfig(base_url="http://127.0.0.1:8000", model="m", **kwargs)
    assert product in str(e.value) and f"= {words} words" in str(e.value)
    # within the cap as the message counts it: accepted
    LoadTestConfig(base_url="http://127.0.0.1:8000", model="m", num_prompts=199_999, random_input_len=1000)
