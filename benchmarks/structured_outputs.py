"""What structured outputs cost: compile time per kind, and decode throughput of guided requests against the same
requests unguided, cold (the grammar's lexer states built on the way) and warm (built), in one run.

The vocabulary is what makes masks expensive (a mask covers every token), so the model has a real-sized byte-level
BPE vocabulary (``--vocab``, default 32,000, as Llama 2 and Mistral; trained here on a synthetic corpus of words,
numbers and JSON, since nothing comes from a model hub; ``--tokenizer`` takes another, such as GPT-2's). Its body
(``--shape``) is a 2-layer toy (``--hidden``), whose cheap step shows the masks' host work at its largest, or
SmolLM2-135M's (30 layers of 576), a model of the size served on CPUs; the weights are random. Each
guided request runs to its natural end (EOS where the constraint allows it); its unguided twin runs with
``ignore_eos`` for exactly as many tokens, seeded the same, in a batch of the same size, so both measure the same
number of decode steps. Throughput is output tokens per second of the whole batch; the ratio guided / unguided is
what the masks cost. On a GPU the model step is far faster than on a CPU, so the ratio there would be lower: the
mask work is host work (``host_ms_per_guided_token`` is the absolute figure to compare with a GPU step).

Where no core is spare for filling masks beside the forward (a CPU torch runs on every core of), a guided row that
samples by temperature alone (as here) draws before its mask, keeps the draw when the grammar allows it, and is
masked and drawn again only when not (``first_draws_allowed`` / ``first_draws_refused`` per run). A random model's
draws are refused wherever the grammar leaves few tokens (a choice, a regex, JSON's punctuation), so what this saves
here is a lower bound for a model that keeps to its format. Each repeat runs both ways, interleaved (warm repeats
alternate which goes first), and the JSON gives both (``by_draw_first``); ``--draw-first on|off`` runs one. Each
run also gives ``cpu_ratio``, the ratio of this process's CPU time (torch's threads included), which other jobs on a
shared machine do not inflate as they do wall time.

    .venv/bin/python benchmarks/structured_outputs.py [--vocab 32000] [--shape toy|smollm2-135m] [--batch 16] [--repeats 5] [--backend xgrammar] [--draw-first both|on|off]
    python3 benchmarks/structured_outputs.py --device cuda --dtype bfloat16 --shape smollm2-135m   # on a GPU

Writes benchmarks/results/structured_outputs_cpu.json (``--shape smollm2-135m``: structured_outputs_cpu_smollm2-135m.json;
``--device cuda``: structured_outputs_cuda….json), with the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal, get_args

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from accelkit.serve.config import StructuredOutputsBackendName  # noqa: E402  (after the path)
from accelkit.serve.server.tool_parsers import FORMATS  # noqa: E402

BACKENDS = get_args(StructuredOutputsBackendName)  # (the engines accelkit serve offers)
OUT = Path(__file__).resolve().parent / "results" / "structured_outputs_cpu.json"

TOOL_WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                                "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}
TOOL_ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "pattern": "[a-z]{1,10}@[a-z]{1,10}\\.com"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "active"],
}


def pydantic_schema() -> dict[str, Any]:
    """A 16-field pydantic model's ``model_json_schema()``: nested model, enum, Literal, Optional, bounds, a date."""
    import datetime
    import enum

    from pydantic import BaseModel, Field

    class Color(enum.Enum):
        RED, GREEN, BLUE = "red", "green", "blue"

    class Address(BaseModel):
        street: str = Field(max_length=30)
        city: str = Field(max_length=20)
        zip: str = Field(pattern="^[0-9]{5}$")

    class Person(BaseModel):
        name: str = Field(max_length=20)
        age: int = Field(ge=0, le=130)
        email: str | None = Field(None, max_length=30)
        born: datetime.date
        tags: list[str] = Field(max_length=5)
        score: float = Field(ge=0, le=1)
        active: bool
        kind: Literal["a", "b", "c"]
        address: Address
        nick: str | None = None
        level: int = Field(ge=1, le=10)
        notes: str = Field(max_length=40)
        color: Color
        weight: float | None = Field(None, gt=0, lt=500)
        country: str = Field(max_length=2)
        vip: bool = False

    return Person.model_json_schema()


SPECS: dict[str, dict[str, Any]] = {
    "choice": {"choice": ["positive", "negative", "neutral", "mixed feelings"]},
    "regex": {"regex": r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]: [a-z ]{1,40}\."},
    "json_schema": {"json": SCHEMA},
    "json_schema_pydantic16": {"json": pydantic_schema()},
    "json_object": {"json_object": True},
    # tool_choice "auto" under --tool-call-parser hermes: free text until the model opens a call (a random model
    # seldom does: what this measures is the constraint in force while a model writes prose)
    "tools_auto": {"structural_tag": FORMATS["hermes"].structural_tag([("get_weather", TOOL_WEATHER),
                                                                      ("add", TOOL_ADD)])},
}


def corpus(num_lines: int, seed: int) -> list[str]:
    """Words from syllables, numbers, dates, and JSON documents: enough distinct pieces for a 32K BPE."""
    rng = random.Random(seed)
    syllables = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"] + ["th", "ch", "sh", "qu", "é", "ü", "中", "文"]

    def word() -> str:
        return "".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))

    lines = []
    for _ in range(num_lines):
        kind = rng.random()
        if kind < 0.6:
            lines.append(" ".join(word() for _ in range(rng.randint(4, 16))) + rng.choice([".", ",", "!", "?"]))
        elif kind < 0.8:
            doc = {word(): rng.choice([word(), rng.randint(-10**6, 10**6), rng.random() < 0.5, None,
                                        [word() for _ in range(rng.randint(0, 3))]]) for _ in range(rng.randint(1, 5))}
            lines.append(json.dumps(doc, ensure_ascii=False, indent=rng.choice([None, 2])))
        else:
            lines.append(f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                         f"{rng.randint(0, 10**9)} {word()}@{word()}.com")
    return lines


#: model bodies: the 2-layer toy (its ``--hidden``; 4 heads of 16, the test preset's head size), where a step costs
#: little and the masks' host work shows most; and SmolLM2-135M's (Hugging Face's small Llama for CPUs and edge
#: devices: 30 layers of 576, 9 heads of 64 over 3 KV heads, MLP 1536, tied embeddings), a model of the size served
#: on CPUs, whose step costs about ten times the toy's
SHAPES: dict[str, dict[str, Any]] = {
    "toy": {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16},
    "smollm2-135m": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "tie_word_embeddings": True,
    },
}


def model_body(shape: str, hidden: int) -> dict[str, Any]:
    """The config of ``shape``'s body (the toy ``hidden`` wide), as built and as recorded in the JSON."""
    return {"hidden_size": hidden, "intermediate_size": 4 * hidden, **SHAPES[shape]}


def build_model(path: Path, vocab: int, hidden: int, shape: str = "toy", tokenizer_dir: Path | None = None,
                **overrides: Any) -> int:
    """A random Llama of ``shape`` (the toy: ``hidden`` wide; ``overrides`` to its config) and a byte-level BPE of
    (up to) ``vocab`` tokens, or the tokenizer in ``tokenizer_dir`` (GPT-2's: benchmarks/gpt2_tokenizer.py); returns
    the tokenizer's size."""
    from transformers import AutoTokenizer

    from accelkit.serve.testing import build_bytelevel_tokenizer, save_tiny_model

    tokenizer = (AutoTokenizer.from_pretrained(tokenizer_dir) if tokenizer_dir is not None
                 else build_bytelevel_tokenizer(vocab, corpus(200_000, seed=0)))
    size = len(tokenizer)
    save_tiny_model(path, vocab_size=size, max_position_embeddings=2048, **{**model_body(shape, hidden), **overrides})
    tokenizer.save_pretrained(path)  # (replaces the word-level tokenizer save_tiny_model writes)
    return size


def timed_generate(llm: Any, prompts: list[str], params: list[Any]) -> tuple[float, float, list[Any]]:
    """(wall seconds, this process's CPU seconds — what other jobs on the machine do not add —, the outputs)."""
    start, cpu = time.perf_counter(), time.process_time()
    outs = llm.generate(prompts, params)
    return time.perf_counter() - start, time.process_time() - cpu, outs


def previous_apply(logits: Any, bitmask: Any) -> None:
    """The CPU application of the bitmask before #28's profiling: numpy unpack, then torch ``~`` and
    ``masked_fill_`` (two ops on torch's intra-op threads). ``--with-previous`` runs it beside the current one."""
    import numpy as np
    import torch

    bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, count=logits.shape[1], bitorder="little")
    logits.masked_fill_(~torch.from_numpy(bits.view(np.bool_)), float("-inf"))


def timed_previous(llm: Any, prompts: list[str], params: list[Any]) -> float:
    """The guided batch again, the sampler applying masks the previous way (swapped in this process only)."""
    import accelkit.serve.sampler as sampler

    names = vars(sampler)
    current = names["apply_token_bitmask_"]
    names["apply_token_bitmask_"] = previous_apply
    try:
        return timed_generate(llm, prompts, params)[0]
    finally:
        names["apply_token_bitmask_"] = current


def train_on_its_outputs(llm: Any, path: Path, kinds: list[str], batch: int, max_tokens: int, steps: int
                         ) -> dict[str, Any]:
    """A model that keeps to its formats, made from the random one: its own guided outputs of each kind (4 batches
    per kind, seeded apart from the measured requests, after the same prompts' ``"{kind} {i}:"``) as training text,
    ``steps`` AdamW steps of next-token loss on them, the weights saved over the model's. What it learns is what a
    model prompted for a format does: draw tokens the grammar allows."""
    import torch
    from transformers import AutoModelForCausalLM

    from accelkit.serve import SamplingParams
    from accelkit.serve.sampling import StructuredOutputs

    eos = llm.engine.tokenizer.eos_token_id
    texts: list[list[int]] = []
    for kind in kinds:
        spec = StructuredOutputs(**SPECS[kind])
        for rep in range(4):
            params = [SamplingParams(temperature=1.0, seed=10_000 + rep * batch + i, max_tokens=max_tokens,
                                     structured_outputs=spec) for i in range(batch)]
            for out in llm.generate([f"{kind} {i}:" for i in range(batch)], params):
                ids = list(out.prompt_token_ids) + list(out.token_ids)
                if out.finish_reason == "stop" and ids[-1] != eos:
                    ids.append(eos)
                texts.append(ids)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        picked = rng.sample(texts, 8)
        width = max(len(t) for t in picked)
        ids = torch.tensor([t + [eos] * (width - len(t)) for t in picked])
        labels = torch.tensor([t + [-100] * (width - len(t)) for t in picked])
        mask = torch.tensor([[1] * len(t) + [0] * (width - len(t)) for t in picked])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step % 50 == 0:
            print(f"training step {step}: loss {losses[-1]:.2f}", file=sys.stderr)
    model.save_pretrained(path)
    return {"steps": steps, "sequences": len(texts), "batch": 8, "lr": 3e-3, "seconds": time.perf_counter() - start,
            "loss_first": losses[0], "loss_last_10_mean": statistics.mean(losses[-10:])}


def guided_run(llm: Any, prompts: list[str], guided: list[Any], draw_first: bool) -> dict[str, Any]:
    """One guided batch (``draw_first``: the sampler's way for rows it may draw before their mask) and its unguided
    twin, timed."""
    from accelkit.serve import SamplingParams

    sampler = llm.engine.runner.sampler
    sampler.draw_first = draw_first
    drawn = (sampler.first_draws_allowed, sampler.first_draws_refused)
    guided_s, guided_cpu_s, outs = timed_generate(llm, prompts, guided)
    drawn = (sampler.first_draws_allowed - drawn[0], sampler.first_draws_refused - drawn[1])
    lengths = [len(o.token_ids) for o in outs]
    plain = [SamplingParams(temperature=1.0, seed=i, max_tokens=n, ignore_eos=True) for i, n in enumerate(lengths)]
    plain_s, plain_cpu_s, _ = timed_generate(llm, prompts, plain)
    tokens = sum(lengths)
    return {
        "draw_first": draw_first, "output_tokens": tokens,
        "finished_stop": sum(o.finish_reason == "stop" for o in outs),
        "guided_tok_s": tokens / guided_s, "unguided_tok_s": tokens / plain_s,
        "ratio": plain_s / guided_s,
        "host_ms_per_guided_token": 1e3 * (guided_s - plain_s) / tokens,
        # the same from the process's CPU time (torch's threads included): steadier where other jobs share the cores
        "cpu_ratio": plain_cpu_s / guided_cpu_s,
        # guided tokens drawn before their mask: kept (the grammar allowed them), and drawn again masked
        "first_draws_allowed": drawn[0], "first_draws_refused": drawn[1],
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    warm = [r for r in runs if not r["cold"]]
    return {
        "cold_ratio": runs[0]["ratio"],
        "warm_ratio_median": statistics.median(r["ratio"] for r in warm) if warm else None,
        "warm_host_ms_per_guided_token_median":
            statistics.median(r["host_ms_per_guided_token"] for r in warm) if warm else None,
        "warm_cpu_ratio_median": statistics.median(r["cpu_ratio"] for r in warm) if warm else None,
    }


def run_kind(llm: Any, kind: str, batch: int, max_tokens: int, repeats: int, modes: list[bool],
             with_previous: bool = False) -> dict[str, Any]:
    """Each repeat runs the guided batch once per way in ``modes`` (draw first or not), each followed by its
    unguided twin; warm repeats alternate which way goes first, so drift on a shared machine falls on both."""
    from accelkit.serve import SamplingParams
    from accelkit.serve.sampling import StructuredOutputs

    spec = StructuredOutputs(**SPECS[kind])
    start = time.perf_counter()
    llm.engine.structured_guide(spec)
    compile_s = time.perf_counter() - start
    prompts = [f"{kind} {i}:" for i in range(batch)]
    guided = [SamplingParams(temperature=1.0, seed=i, max_tokens=max_tokens, structured_outputs=spec)
              for i in range(batch)]
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):  # repeat 0 is cold: the lexer builds its states as they are reached
        for mode in modes if repeat % 2 == 0 else modes[::-1]:
            run = {"repeat": repeat, "cold": repeat == 0, **guided_run(llm, prompts, guided, mode)}
            if with_previous and mode == modes[0]:  # (after a guided batch: it is the one that pays for cold states)
                previous_s = timed_previous(llm, prompts, guided)
                plain_s = run["output_tokens"] / run["unguided_tok_s"]
                run.update(previous_apply_ratio=plain_s / previous_s,
                           previous_apply_host_ms_per_guided_token=1e3 * (previous_s - plain_s) / run["output_tokens"])
            runs.append(run)
    by_mode = {("on" if m else "off"): summary([r for r in runs if r["draw_first"] is m]) for m in modes}
    warm = [r for r in runs if not r["cold"] and r["draw_first"] is modes[0]]
    return {
        "kind": kind, "spec": SPECS[kind], "compile_s": compile_s, "runs": runs,
        **by_mode["on" if modes[0] else "off"],  # (the first way: the engine's own unless --draw-first off)
        "by_draw_first": by_mode,
        **({"warm_previous_apply_ratio_median": statistics.median(r["previous_apply_ratio"] for r in warm)}
           if with_previous and warm else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=32_000)
    parser.add_argument("--hidden", type=int, default=256, help="the toy's width")
    parser.add_argument("--shape", choices=SHAPES, default="toy",
                        help="the model's body: the 2-layer toy (host work shows most), or SmolLM2-135M's")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="a Hugging Face tokenizer folder to use instead of the BPE built here (GPT-2's: "
                             "benchmarks/gpt2_tokenizer.py); --vocab is then ignored")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu (the default), cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="the model's dtype (float32 on a CPU; bfloat16 as a GPU serves)")
    parser.add_argument("--kinds", default=",".join(SPECS))
    parser.add_argument("--out", type=Path, default=None,
                        help=f"default {OUT.name}, or structured_outputs_<device>[_<shape>].json")
    parser.add_argument("--backend", choices=BACKENDS, default="llguidance",
                        help="the structured-outputs engine (accelkit serve --structured-outputs-backend)")
    parser.add_argument("--fill", choices=("auto", "inline", "pool"), default="auto",
                        help="how a step's masks are filled: as the engine decides for this machine (auto), one row "
                             "after another on the engine thread (inline), or on llguidance's thread pool (pool)")
    parser.add_argument("--draw-first", choices=("both", "on", "off"), default="both",
                        help="guided rows draw before their mask and are masked only when the grammar refuses the "
                             "draw, as the engine does where no core is spare (on), or are always masked first "
                             "(off); both: each repeat runs both ways, interleaved (the default)")
    parser.add_argument("--train-steps", type=int, default=0,
                        help="first train the random model this many steps on its own guided outputs (a model that "
                             "keeps to its formats, as one prompted for them does), then measure it")
    parser.add_argument("--with-previous", action="store_true",
                        help="also run each guided batch with the previous CPU mask application, interleaved")
    args = parser.parse_args()
    if args.out is None:
        device = args.device.split(":")[0]
        args.out = OUT.with_name(f"structured_outputs_{device}{'' if args.shape == 'toy' else '_' + args.shape}.json")
    import torch

    from accelkit.hardware.detect import environment
    from accelkit.serve import LLM

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        size = build_model(Path(tmp) / "m", args.vocab, args.hidden, args.shape, args.tokenizer)
        print(f"model and {size}-token byte-level BPE built in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        engine_args = {"kv_cache_memory_bytes": 256 << 20, "max_model_len": 1024, "dtype": args.dtype,
                       "device": args.device, "structured_outputs_backend": args.backend}
        llm = LLM(str(Path(tmp) / "m"), **engine_args)
        training = None
        if args.train_steps:
            training = train_on_its_outputs(llm, Path(tmp) / "m", args.kinds.split(","), args.batch, args.max_tokens,
                                            args.train_steps)
            llm = LLM(str(Path(tmp) / "m"), **engine_args)
        from accelkit.serve import StructuredOutputs

        start = time.perf_counter()  # the engine's first structured request converts the tokenizer for llguidance
        llm.engine.structured_guide(StructuredOutputs(regex="a"))
        vocabulary_s = time.perf_counter() - start
        backend: Any = llm.engine.structured_compiler.backend()
        if args.fill != "auto":
            backend.parallel_fill = args.fill == "pool"
        print(f"masks filled {'on the pool' if backend.parallel_fill else 'inline'}", file=sys.stderr)
        print(f"tokenizer converted for llguidance in {vocabulary_s:.2f} s (once per engine)", file=sys.stderr)
        modes = {"both": [True, False], "on": [True], "off": [False]}[args.draw_first]
        results = []
        for kind in args.kinds.split(","):
            result = run_kind(llm, kind, args.batch, args.max_tokens, args.repeats, modes, args.with_previous)
            results.append(result)
            for mode, part in result["by_draw_first"].items():
                warm = (f"warm {part['warm_ratio_median']:.2f}× ({part['warm_host_ms_per_guided_token_median']:.2f} ms "
                        f"host per guided token; CPU time {part['warm_cpu_ratio_median']:.2f}×)"
                        if part["warm_ratio_median"] is not None else "no warm repeat (--repeats 1)")
                print(f"{kind:12s} draw first {mode:3s} compile {result['compile_s']:6.2f} s   cold "
                      f"{part['cold_ratio']:.2f}× unguided   {warm}", file=sys.stderr)
    doc = {
        "benchmark": "structured_outputs",
        "command": "python benchmarks/structured_outputs.py " + " ".join(sys.argv[1:]),
        "settings": {"vocab_requested": args.vocab, "vocab": size, "shape": args.shape,
                     "tokenizer": str(args.tokenizer) if args.tokenizer else "byte-level BPE built here",
                     "model": model_body(args.shape, args.hidden),
                     "batch": args.batch, "max_tokens": args.max_tokens, "repeats": args.repeats,
                     "threads": args.threads, "dtype": args.dtype, "device": args.device,
                     "with_previous": args.with_previous, "backend": args.backend, "fill": args.fill,
                     "draw_first": args.draw_first, "training": training,
                     "masks_filled": "pool" if backend.parallel_fill else "inline"},
        "load_average_at_end": [round(v, 2) for v in os.getloadavg()],
        "vocabulary_s": vocabulary_s,
        "results": results,
        "environment": environment(with_torch=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
