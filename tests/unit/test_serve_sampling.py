"""SamplingParams refuses, in the caller's thread, every value the sampler would choke on in the engine thread."""

import math

import pytest

from accelkit.serve.sampling import GREEDY_BELOW, MAX_STOP_STRINGS, SEED_MAX, SEED_MIN, SamplingParams


@pytest.mark.parametrize("seed", [SEED_MIN, -1, 0, 2**63, SEED_MAX])
def test_every_seed_manual_seed_accepts_is_valid(seed):
    assert SamplingParams(seed=seed).seed == seed


@pytest.mark.parametrize("seed", [SEED_MIN - 1, SEED_MAX + 1, 10**30])
def test_a_seed_manual_seed_refuses_is_a_value_error_naming_seed(seed):
    with pytest.raises(ValueError, match=r"^seed="):
        SamplingParams(seed=seed, temperature=1.0)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"temperature": math.inf}, "temperature"), ({"temperature": math.nan}, "temperature"),
    ({"temperature": -1e-9}, "temperature"), ({"top_p": math.nan}, "top_p"), ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.0 + 1e-12}, "top_p"), ({"top_k": -2}, "top_k"), ({"max_tokens": 0}, "max_tokens"),
    ({"stop": ("",)}, "stop"), ({"stop": ("x",) * (MAX_STOP_STRINGS + 1)}, "stop"),
    ({"stop_token_ids": (-1,)}, "stop_token_ids"), ({"stop_token_ids": tuple(range(1025))}, "stop_token_ids"),
    # 1e-300 rounds to 0 in the sampler's float32 (inf logits, NaN probabilities: token 0 sampled), 1e300 to inf
    ({"repetition_penalty": 1e-300}, "repetition_penalty"), ({"repetition_penalty": 1e300}, "repetition_penalty"),
    ({"repetition_penalty": math.nan}, "repetition_penalty"), ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"allowed_token_ids": ()}, "allowed_token_ids"), ({"allowed_token_ids": (5, -1)}, "allowed_token_ids"),
    ({"allowed_token_ids": (5, 2.0)}, "allowed_token_ids"), ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
    ({"truncate_prompt_tokens": -1}, "truncate_prompt_tokens"),
    ({"include_stop_str_in_output": 1}, "include_stop_str_in_output"),
])
def test_values_past_the_limits_name_their_field(kwargs, field):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    assert str(info.value).split("=")[0].split()[0] == field  # what the server turns into the 400's param


def test_a_temperature_too_small_for_float32_is_greedy():
    assert SamplingParams(temperature=GREEDY_BELOW / 10).is_greedy
    assert not SamplingParams(temperature=GREEDY_BELOW).is_greedy
    assert SamplingParams(temperature=1e300, top_k=10**30, max_tokens=10**30).top_k == 10**30  # extreme but valid


def test_a_temperature_past_float32_samples_uniformly_without_overflow():
    """SamplingParams takes any finite temperature; past float32's range the row is uniform (as it would be
    at infinity), with no overflow in the settings' float32 buffer."""
    import warnings

    import torch

    from accelkit.serve.sampler import Sampler
    from accelkit.serve.sampling import SamplingParams

    sampler = Sampler(torch.device("cpu"), seed=0)
    logits = torch.tensor([[10.0, 0.0, 0.0, 0.0]]).repeat(400, 1)  # at temperature 1, token 0 nearly always
    params = [SamplingParams(temperature=1e300, max_tokens=1)] * 400
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tokens = sampler(logits, params, list(range(400)))
    assert set(tokens) == {0, 1, 2, 3} and tokens.count(0) < 200


def test_vllms_extensions_are_typed_fields_and_only_allowed_token_ids_takes_the_samplers_slower_path():
    params = SamplingParams(allowed_token_ids=[7, 5], include_stop_str_in_output=True, truncate_prompt_tokens=3)
    assert params.allowed_token_ids == (7, 5)  # a list becomes a tuple: params are frozen all the way down
    assert params.include_stop_str_in_output and params.truncate_prompt_tokens == 3
    assert SamplingParams.from_dict(params.to_dict()) == params
    assert SamplingParams(allowed_token_ids=(5,)).needs_processing
    assert not SamplingParams(include_stop_str_in_output=True, truncate_prompt_tokens=3).needs_processing


def test_bad_words_are_checked_and_not_combined_with_structured_outputs():
    from accelkit.serve.sampling import StructuredOutputs

    with pytest.raises(ValueError, match="^bad_words cannot be combined with structured_outputs"):
        SamplingParams(bad_words=("x",), structured_outputs=StructuredOutputs(regex="a"))
    with pytest.raises(ValueError, match="^bad_words has '  ' .*not only spaces"):
        SamplingParams(bad_words=("  ",))
    assert SamplingParams(bad_words=("x",)).needs_processing and not SamplingParams().needs_processing
