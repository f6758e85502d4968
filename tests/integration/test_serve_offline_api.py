"""The offline ``LLM`` API as vLLM users call it: prompt dicts, numpy ids, priorities, top_k's "no limit" values,
unsupported architectures and the smallest KV budget the preflight names."""

import math
import re

import numpy as np
import pytest

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import save_tiny_model

KV_BYTES = 8 * 2**20
IDS = [5, 6, 7, 8]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("offline") / "m", "tiny-llama", seed=5))


@pytest.fixture(scope="module")
def llm(model_dir):
    return LLM(model_dir, kv_cache_memory_bytes=KV_BYTES, max_model_len=64)


def _greedy(llm, prompts, n=5):
    return [(o.prompt_token_ids, o.token_ids) for o in llm.generate(prompts, SamplingParams.greedy(n))]


# ---- vLLM's prompt dicts ---------------------------------------------------------------------------------
def test_prompt_dicts_generate_for_their_contents(llm):
    by_ids, by_text = _greedy(llm, [IDS]), _greedy(llm, ["w5 w6"])
    assert by_ids[0][0] == IDS and by_text[0][0] != IDS
    # one dict alone: before, list(prompts) iterated its keys and generated for the text 'prompt_token_ids'
    assert _greedy(llm, {"prompt_token_ids": IDS}) == by_ids
    assert _greedy(llm, {"prompt": "w5 w6"}) == by_text
    assert _greedy(llm, {"prompt_token_ids": tuple(IDS)}) == by_ids
    mixed = _greedy(llm, [{"prompt_token_ids": IDS}, {"prompt": "w5 w6"}, "w5 w6", IDS])
    assert mixed == by_ids + by_text + by_text + by_ids


@pytest.mark.parametrize(("prompt", "words"), [
    ({"prompt": "w5", "multi_modal_data": {}}, "'multi_modal_data', which the engine does not take"),
    ({"prompt": "w5", "prompt_token_ids": IDS}, "both 'prompt' and 'prompt_token_ids'"),
    ({}, "neither 'prompt' and 'prompt_token_ids'"),
    ({"prompt_token_ids": "w5 w6"}, "prompt_token_ids='w5 w6' is not valid"),
    ({"prompt": IDS}, "prompt=[5, 6, 7, 8] is not valid"),
    ({"prompt_token_ids": [5, 10**9]}, "prompt_token_ids[1]=1000000000 is not a token id"),
])
def test_a_bad_prompt_dict_is_one_error_naming_it(llm, prompt, words):
    for prompts in (prompt, ["w5", prompt]):
        with pytest.raises(ValueError) as info:
            llm.generate(prompts, SamplingParams.greedy(2))
        message = str(info.value)
        assert words in message and "\n" not in message
    assert not llm.engine.has_unfinished_requests()  # validated before anything was queued


# ---- token ids, priority, top_k ------------------------------------------------------------------------
def test_numpy_and_tuple_token_ids_are_token_ids(llm):
    ref = _greedy(llm, [IDS])
    numpy_ids = list(np.arange(5, 9))  # np.int64 items: were "not a token id"
    assert _greedy(llm, [numpy_ids]) == ref
    assert _greedy(llm, numpy_ids) == ref  # one prompt of numpy ids, not four prompts of one id each
    assert _greedy(llm, tuple(IDS)) == ref
    assert _greedy(llm, np.array(IDS)) == ref  # a 1-D array is one prompt (it was read as four prompts of one id)
    assert _greedy(llm, [np.array(IDS, dtype=np.int32)]) == ref
    assert all(type(t) is int for t in llm.generate([numpy_ids], SamplingParams.greedy(1))[0].prompt_token_ids)
    with pytest.raises(ValueError, match=r"prompt_token_ids\[1\]=np.float64\(6.0\) is not a token id"):
        llm.generate([[5, np.float64(6.0)]])


def test_priority_is_checked_like_sampling_params(llm, model_dir):
    with pytest.raises(ValueError, match=r"^priority has 1 entries for 2 prompts; give one per prompt$"):
        llm.generate(["w5", "w6"], SamplingParams.greedy(2), priority=[1])
    # FCFS would take it and not honour it: refused, as the server (400) and vLLM refuse it
    with pytest.raises(ValueError, match=r"priority=\[1, 0\] needs scheduling_policy='priority' \(this LLM's is 'fcfs'\)"):
        llm.generate(["w5", "w6"], SamplingParams.greedy(2), priority=[1, 0])
    assert len(llm.generate(["w5", "w6"], SamplingParams.greedy(2), priority=[0, 0])) == 2
    with pytest.raises(ValueError, match="priority='5' is not valid; expected an integer, or a list of integers"):
        llm.generate(["w5"], SamplingParams.greedy(2), priority="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"priority=\[5, 5\] needs scheduling_policy='priority'"):
        llm.generate(["w5", "w6"], SamplingParams.greedy(2), priority=5)  # one integer: the same for every prompt
    by_priority = LLM(model_dir, kv_cache_memory_bytes=KV_BYTES, max_model_len=64, scheduling_policy="priority")
    assert len(by_priority.generate(["w5", "w6"], SamplingParams.greedy(2), priority=np.int64(2))) == 2
    outs = by_priority.generate(["w5", "w6"], SamplingParams.greedy(3), priority=[np.int64(1), 0])
    assert [o.token_ids for o in outs] == [o.token_ids for o in llm.generate(["w5", "w6"], SamplingParams.greedy(3))]


def test_top_k_zero_and_minus_one_mean_no_limit_as_in_vllm(llm):
    for k in (0, -1):
        params = SamplingParams(top_k=k, seed=7, max_tokens=6)
        assert params.top_k is None and params == SamplingParams(seed=7, max_tokens=6)
        assert SamplingParams(top_k=3).replace(top_k=k).top_k is None
    assert [o.token_ids for o in llm.generate(["w5 w6"], SamplingParams(top_k=-1, seed=7, max_tokens=6))] == \
        [o.token_ids for o in llm.generate(["w5 w6"], SamplingParams(seed=7, max_tokens=6))]
    for bad in (-2, False):
        with pytest.raises(ValueError, match="top_k"):
            SamplingParams(top_k=bad)
    with pytest.raises(ValueError, match=r"top_k=-5 .*0, -1 or None for no limit"):  # not just ">= 1"
        SamplingParams(top_k=-5)


def test_one_stop_string_is_one_stop_string_as_in_vllm(llm):
    params = SamplingParams.greedy(8, stop="\n")
    assert params.stop == ("\n",) and params == SamplingParams.greedy(8, stop=["\n"])


@pytest.mark.parametrize("prompts", [None, 5, b"w5"])
def test_something_that_is_not_a_prompt_is_one_error_naming_it(llm, prompts):
    with pytest.raises(ValueError, match=r"prompts=.* is not a prompt; expected text, token ids"):
        llm.generate(prompts, SamplingParams.greedy(2))


def test_a_loop_never_started_refuses_requests_instead_of_hanging(llm):
    from accelkit.serve.loop import EngineLoop

    loop = EngineLoop(llm.engine)
    with pytest.raises(RuntimeError, match="not started"):
        loop.add_request(IDS, SamplingParams.greedy(2))
    assert not llm.engine.has_unfinished_requests()


# ---- architectures -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("arch", "make"), [
    ("GPT2LMHeadModel", lambda t: t.GPT2LMHeadModel(t.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64,
                                                                n_positions=32))),
    ("GPTBigCodeForCausalLM", lambda t: t.GPTBigCodeForCausalLM(t.GPTBigCodeConfig(n_layer=1, n_embd=16, n_head=2,
                                                                                  vocab_size=64, n_positions=32))),
])
def test_an_unsupported_architecture_is_refused_as_such(tmp_path, arch, make):
    """GPT-2 and GPTBigCode name their sizes n_embd/n_layer: the refusal must be the architecture's, not
    "config.json has no 'hidden_size'", which sends the user to fix a file that is fine."""
    import transformers

    make(transformers).save_pretrained(tmp_path)
    with pytest.raises(ValueError) as info:
        LLM(str(tmp_path))
    message = str(info.value)
    assert f"architectures=['{arch}'] in {tmp_path / 'config.json'} is not supported" in message
    assert "LlamaForCausalLM" in message and "hidden_size" not in message


# ---- the smallest KV budget ----------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "kv_cache_dtype"), [("bfloat16", "auto"), ("float32", "int8")])
def test_the_named_minimum_kv_budget_is_exactly_what_the_engine_takes(model_dir, dtype, kv_cache_dtype):
    """The preflight's "needs at least N" counts the scratch block and the quantized caches' scales: a budget
    of N runs, N - 1 is refused by the preflight (it used to pass it, and the engine failed after loading)."""
    kwargs = {"dtype": dtype, "kv_cache_dtype": kv_cache_dtype, "max_model_len": 40, "block_size": 16}
    with pytest.raises(ValueError, match="needs at least") as info:
        LLM(model_dir, kv_cache_memory_bytes=1024, **kwargs)
    named = re.search(r"needs at least \S+ \S+ \((\d+) bytes\) of KV cache", str(info.value))
    # what the cache really allocates per token slot (fp8/int8: a float16 scale per token and head besides the codes)
    cache = LLM(model_dir, kv_cache_memory_bytes=KV_BYTES, **kwargs).engine.runner.kv_cache
    per_token = cache.num_bytes // (cache.num_blocks * cache.block_size)
    minimum = (math.ceil(40 / 16) + 1) * 16 * per_token  # one full context's blocks and the scratch block
    llm = LLM(model_dir, kv_cache_memory_bytes=minimum, **kwargs)
    out = llm.generate([list(range(4, 30))], SamplingParams.greedy(14, ignore_eos=True))[0]
    assert len(out.token_ids) == 14  # one full context (26 + 14 = 40 tokens) fits
    with pytest.raises(ValueError, match=rf"max_model_len=40 needs at least \S+ \S+ \({minimum} bytes\) of KV cache"):
        LLM(model_dir, kv_cache_memory_bytes=minimum - 1, **kwargs)
    assert named is not None and int(named.group(1)) == minimum


# ---- vLLM's documented offline examples, unchanged but for the import and the model ----------------------
VLLM_BASIC_EXAMPLE = '''
from accelkit.serve import LLM, SamplingParams

prompts = [
    "Hello, my name is",
    "The president of the United States is",
    "The capital of France is",
    "The future of AI is",
]
sampling_params = SamplingParams(temperature=0.8, top_p=0.95)

llm = LLM(model=MODEL)
outputs = llm.generate(prompts, sampling_params)
print("\\nGenerated Outputs:\\n" + "-" * 60)
for output in outputs:
    prompt = output.prompt
    generated_text = output.outputs[0].text
    print(f"Prompt:    {prompt!r}")
    print(f"Output:    {generated_text!r}")
    print("-" * 60)
'''

VLLM_CHAT_EXAMPLE = '''
from accelkit.serve import LLM, SamplingParams

llm = LLM(model=MODEL)
sampling_params = SamplingParams(temperature=0.5)


def print_outputs(outputs):
    print("\\nGenerated Outputs:\\n" + "-" * 80)
    for output in outputs:
        prompt = output.prompt
        generated_text = output.outputs[0].text
        print(f"Prompt: {prompt!r}\\n")
        print(f"Generated text: {generated_text!r}")
        print("-" * 80)


conversation = [
    {"role": "system", "content": "You are a helpful assistant"},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hello! How can I assist you today?"},
    {"role": "user", "content": "Write an essay about the importance of higher education."},
]
outputs = llm.chat(conversation, sampling_params, use_tqdm=False)
print_outputs(outputs)

conversations = [conversation for _ in range(10)]
outputs = llm.chat(conversations, sampling_params, use_tqdm=True)
print_outputs(outputs)
'''


def _run_example(source, model_dir, capsys):
    scope = {"MODEL": model_dir}
    exec(compile(source, "example", "exec"), scope)  # the example is this file's own text
    return scope, capsys.readouterr().out


def test_vllm_basic_example_runs_unchanged(model_dir, capsys):
    scope, out = _run_example(VLLM_BASIC_EXAMPLE, model_dir, capsys)
    outputs = scope["outputs"]
    assert [o.prompt for o in outputs] == scope["prompts"]
    for o in outputs:
        (first,) = o.outputs
        assert first.index == 0 and first.text == o.text and first.token_ids == o.token_ids
        assert first.finish_reason == o.finish_reason and first.finished()
        assert f"Output:    {first.text!r}" in out
    assert out.count("Prompt:") == 4


def test_vllm_chat_example_runs_unchanged(model_dir, capsys):
    scope, out = _run_example(VLLM_CHAT_EXAMPLE, model_dir, capsys)
    tokenizer = scope["llm"].get_tokenizer()
    rendered = tokenizer.apply_chat_template(scope["conversation"], add_generation_prompt=True, tokenize=False)
    ids = tokenizer.apply_chat_template(scope["conversation"], add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    outputs = scope["outputs"]
    assert len(outputs) == 10 and out.count("Generated text:") == 11
    for o in outputs:
        # the rendered template is the prompt, tokenized without a second BOS, as apply_chat_template(tokenize=True)
        assert o.prompt == rendered and o.prompt_token_ids == list(ids)


def test_chat_generates_what_generate_does_for_the_rendered_prompt(llm):
    conversation = [{"role": "user", "content": "w5 w6 w7"}]
    (chat,) = llm.chat(conversation, SamplingParams.greedy(6))
    (plain,) = llm.generate({"prompt_token_ids": chat.prompt_token_ids}, SamplingParams.greedy(6))
    assert chat.token_ids == plain.token_ids and chat.outputs[0].text == plain.text
    two = llm.chat([conversation, [*conversation, {"role": "assistant", "content": "w9"}]], SamplingParams.greedy(6))
    assert two[0].token_ids == chat.token_ids and two[1].prompt != two[0].prompt


@pytest.mark.parametrize(("messages", "words"), [
    ("hello", "messages='hello' is not a conversation"),
    ([{"role": "user", "content": "w5"}, "w6"], "messages holds 'w6', which is not a message"),
    ([[{"role": "user", "content": "w5"}], 7], "messages[1]=7 is not a conversation"),
])
def test_a_bad_conversation_is_one_error_naming_it(llm, messages, words):
    with pytest.raises(ValueError) as info:
        llm.chat(messages, SamplingParams.greedy(2))
    assert words in str(info.value) and "\n" not in str(info.value)
    assert not llm.engine.has_unfinished_requests()


def test_a_template_variable_that_would_replace_an_argument_is_refused(llm):
    with pytest.raises(ValueError, match="chat_template_kwargs cannot set add_generation_prompt"):
        llm.chat([{"role": "user", "content": "w5"}], chat_template_kwargs={"add_generation_prompt": False})


def test_stop_reason_names_the_stop_string_or_token_as_vllm_does(llm):
    (free,) = llm.generate([IDS], SamplingParams.greedy(8))
    assert free.outputs[0].stop_reason is None and free.finish_reason == "length"
    word = free.text.split()[2]
    (by_string,) = llm.generate([IDS], SamplingParams(temperature=0.0, max_tokens=8, stop=[word, "never-seen"]))
    assert by_string.finish_reason == "stop" and by_string.outputs[0].stop_reason == word
    token = free.token_ids[3]
    (by_token,) = llm.generate([IDS], SamplingParams(temperature=0.0, max_tokens=8, stop_token_ids=[token]))
    assert by_token.finish_reason == "stop" and by_token.outputs[0].stop_reason == token
    assert by_token.token_ids[-1] == token


def test_cumulative_logprob_sums_the_sampled_tokens_with_logprobs_only(llm):
    (plain,) = llm.generate([IDS], SamplingParams.greedy(5))
    assert plain.outputs[0].cumulative_logprob is None
    (scored,) = llm.generate([IDS], SamplingParams(temperature=0.0, max_tokens=5, logprobs=2))
    first = scored.outputs[0]
    assert first.cumulative_logprob == pytest.approx(sum(lp for lp, _ in scored.logprobs))
    assert first.cumulative_logprob < 0 and len(first.logprobs) == 5
