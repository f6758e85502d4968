"""SamplingParams are frozen all the way down: logit_bias, the one mutable field, cannot be changed under a request
the engine is running; it is still a dict for readers, equality, JSON, pickle and copies."""

import copy
import json
import pickle

import pytest

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import save_tiny_model


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = save_tiny_model(tmp_path_factory.mktemp("frozen-bias") / "tiny", "tiny-llama")
    return LLM(str(path), kv_cache_memory_bytes=2 << 20, max_model_len=64)


def test_logit_bias_of_a_running_request_cannot_be_changed(llm):
    """It was a plain dict inside frozen params: ``params.logit_bias[17] = -100`` after submitting changed the
    running request's sampling (and an id past the vocabulary, checked only at submission, would reach the
    sampler)."""
    engine = llm.engine
    params = SamplingParams.greedy(4, logit_bias={17: 100.0}, ignore_eos=True)
    rid = engine.add_request([5, 6, 7], params)
    engine.step()  # running: the first token is sampled with the bias
    for change in (lambda b: b.__setitem__(17, -100.0), lambda b: b.pop(17), lambda b: b.update({10**9: 1.0}),
                   lambda b: b.clear(), lambda b: b.setdefault(18, 5.0), lambda b: b.__delitem__(17)):
        with pytest.raises(TypeError, match="read-only"):
            change(params.logit_bias)
    outputs = []
    while engine.has_unfinished_requests():
        outputs += [o for o in engine.step() if o.request_id == rid and o.finished]
    assert outputs[0].token_ids == [17, 17, 17, 17]
    assert params.logit_bias == {17: 100.0}


def test_the_callers_dict_stays_theirs_and_the_params_round_trip():
    bias = {5: 1.5, 9: -100.0}
    params = SamplingParams(logit_bias=bias)
    bias[5] = 50.0  # the caller's own dict: the params hold a copy
    assert params.logit_bias == {5: 1.5, 9: -100.0} and params.logit_bias[9] == -100.0
    assert isinstance(params.logit_bias, dict) and json.loads(json.dumps(params.to_dict()))["logit_bias"] == {
        "5": 1.5, "9": -100.0}
    for twin in (pickle.loads(pickle.dumps(params)), copy.deepcopy(params), copy.copy(params),
                 SamplingParams.from_dict(params.to_dict()), params.replace(seed=None)):
        assert twin == params and hash(twin) == hash(params)
        with pytest.raises(TypeError):
            twin.logit_bias[5] = 0.0  # type: ignore[index]
    changed = params.replace(logit_bias={5: 2.0})
    assert changed.logit_bias == {5: 2.0} and params.logit_bias[5] == 1.5
    assert SamplingParams().logit_bias is None
