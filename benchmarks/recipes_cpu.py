"""What the optimization recipes buy on this CPU, and what they cost in accuracy.

1. A BERT-base-sized encoder classifier (12 layers, hidden 768, 12 heads, MLP 3072) is trained here on a
   synthetic but learnable task (the first token is one of 16 "class" tokens, 8 per label; every other
   token is noise from the rest of the vocabulary), then evaluated
   in fp32, bf16 autocast and int8 dynamic quantization (both backends): throughput measured with the
   variants interleaved (A B C … per round, ratio per round), accuracy on a held-out set.
2. Activation checkpointing on a 12-layer Llama-style decoder training step: bytes saved for backward
   (saved_tensors_hooks) and step time for none / selective / full.

Reproduce: `.venv/bin/python benchmarks/recipes_cpu.py` (writes benchmarks/results/recipes_cpu.json).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from accelkit.core import Recipe
from accelkit.hardware.detect import environment
from accelkit.models import get_preset
from accelkit.models.build import build_model, hf_config
from accelkit.recipes import apply
from accelkit.recipes.memory import saved_activation_bytes

OUT = Path(__file__).parent / "results" / "recipes_cpu.json"
VOCAB, LOW = 1024, 10  # token ids below LOW are reserved
CLASS_TOKENS = (torch.arange(LOW, LOW + 8), torch.arange(LOW + 8, LOW + 16))  # label 0 / label 1
NOISE_LOW = LOW + 16
LR = 5e-5  # post-LN BERT from scratch: 1e-4 made the loss jump around for 100+ steps on this task
WARMUP_STEPS = 30
TRAIN_BATCH = 16


def make_data(n: int, seq: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise tokens everywhere; the first token (where BERT's pooler reads) is one of 8 class tokens of its
    label. (A label tied to *every* token id — e.g. upper vs lower half of the vocabulary — is learnable
    only by memorising each embedding from a handful of examples: it did not train in 150 steps.)"""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (n,), generator=g)
    x = torch.randint(NOISE_LOW, VOCAB, (n, seq), generator=g)
    pick = torch.randint(0, 8, (n,), generator=g)
    x[:, 0] = torch.where(labels == 1, CLASS_TOKENS[1][pick], CLASS_TOKENS[0][pick])
    return x, labels


def train_classifier(steps: int, seq: int, log) -> tuple[torch.nn.Module, dict]:
    spec = get_preset("bert-base").replace(name="bert-base-synthetic", vocab_size=VOCAB)
    config = hf_config(spec, num_labels=2)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).train()
    train = apply(model, Recipe(precision="bf16"))  # bf16 autocast, fp32 master weights
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP_STEPS))  # post-LN needs it
    x_all, y_all = make_data(steps * TRAIN_BATCH, seq, seed=1)
    t0, acc_window = time.perf_counter(), []
    for step in range(steps):
        x, y = x_all[step * TRAIN_BATCH:(step + 1) * TRAIN_BATCH], y_all[step * TRAIN_BATCH:(step + 1) * TRAIN_BATCH]
        out = train(input_ids=x, labels=y)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        warmup.step()
        opt.zero_grad(set_to_none=True)
        acc_window = ([*acc_window, (out.logits.argmax(-1) == y).float().mean().item()])[-10:]
        if step % 10 == 0:
            log(f"  train step {step}: loss {out.loss.item():.4f}, acc(last 10) {statistics.mean(acc_window):.3f}")
        if step >= 40 and statistics.mean(acc_window) > 0.99:
            break
    return model.eval(), {"steps": step + 1, "seconds": time.perf_counter() - t0, "final_train_acc": statistics.mean(acc_window),
                          "batch": TRAIN_BATCH, "seq_len": seq, "precision": "bf16 autocast (fp32 master weights)", "lr": LR, "warmup_steps": WARMUP_STEPS}


def accuracy(model, x, y, batch=64) -> float:
    correct = 0
    with torch.inference_mode():
        for i in range(0, len(x), batch):
            correct += (model(input_ids=x[i:i + batch]).logits.argmax(-1) == y[i:i + batch]).sum().item()
    return correct / len(x)


def interleaved(variants: dict[str, callable], *, rounds: int, iters: int, warmup: int) -> dict[str, list[float]]:
    """Per-round seconds per iteration for each variant, run A B C … A B C … so drift hits all alike."""
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter_ns()
            for _ in range(iters):
                fn()
            samples[name].append((time.perf_counter_ns() - t0) * 1e-9 / iters)
    return samples


def ratio_stats(base: list[float], other: list[float]) -> dict:
    """Per-round ratio base ÷ other (with base = fp32 seconds, other = variant seconds: the speed-up)."""
    ratios = sorted(b / o for b, o in zip(base, other, strict=True))
    return {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1], "n": len(ratios)}


def bench_inference(model, args, log) -> dict:
    x_eval, y_eval = make_data(args.eval_samples, args.seq, seed=2)
    batch = x_eval[: args.batch]
    variants = {
        "fp32": model,
        "bf16": apply(copy.deepcopy(model), Recipe(precision="bf16")),
        "int8-dynamic (torch.ao)": apply(copy.deepcopy(model), Recipe(quantization="int8-dynamic")),
        "int8-dynamic (torchao)": apply(copy.deepcopy(model), Recipe(quantization="int8-dynamic"), quant_backend="torchao"),
    }
    acc = {name: accuracy(m, x_eval, y_eval) for name, m in variants.items()}
    log(f"  accuracy: {acc}")
    with torch.inference_mode():
        samples = interleaved({n: (lambda m=m: m(input_ids=batch)) for n, m in variants.items()},
                              rounds=args.rounds, iters=args.iters, warmup=3)
    results = {}
    for name, s in samples.items():
        results[name] = {
            "accuracy": acc[name],
            "accuracy_drop_abs": acc["fp32"] - acc[name],
            "within_1pct_abs": acc["fp32"] - acc[name] <= 0.01,
            "seconds_per_batch_median": statistics.median(s),
            "samples_per_s": args.batch * len(s) / sum(s),
            "speedup_vs_fp32": ratio_stats(samples["fp32"], s),
            "raw_seconds_per_batch": s,
        }
        log(f"  {name:24s} {results[name]['samples_per_s']:8.1f} samples/s  x{results[name]['speedup_vs_fp32']['median']:.2f}"
            f"  acc {acc[name]:.4f}")
    return {"batch": args.batch, "seq_len": args.seq, "eval_samples": args.eval_samples, "variants": results}


def bench_checkpointing(args, log) -> dict:
    spec = get_preset("tiny-llama").replace(name="llama-12L-h512", num_layers=12, hidden_size=512, num_heads=8,
                                            num_kv_heads=4, ffn_hidden_size=1536, vocab_size=4096)
    base = build_model(spec, seed=0).train()
    x = torch.randint(0, 4096, (args.ckpt_batch, args.ckpt_seq), generator=torch.Generator().manual_seed(3))
    models = {"none": base, **{p: apply(copy.deepcopy(base), Recipe(recompute=p)) for p in ("selective", "full")}}
    out: dict = {"model": spec.to_dict(), "batch": args.ckpt_batch, "seq_len": args.ckpt_seq, "policies": {}}
    out["notes"] = [
        "saved_for_backward_bytes counts what autograd's saved_tensors_hooks see; selective checkpointing keeps "
        "its saved matmul outputs in its own cache, which the hooks do not see, so its figure is a lower bound",
        "backward_flops (FlopCounterMode around backward) shows what each policy recomputes: full re-runs every "
        "forward matmul, selective re-runs none of them (only the cheap element-wise ops)",
    ]
    for name, m in models.items():
        saved, result = saved_activation_bytes(lambda m=m: m(input_ids=x, labels=x, use_cache=False), exclude=m)
        with FlopCounterMode(display=False) as counter:
            result.loss.backward()
        m.zero_grad(set_to_none=True)
        out["policies"][name] = {"saved_for_backward_bytes": saved, "backward_flops": counter.get_total_flops()}

    def step(m):
        m(input_ids=x, labels=x, use_cache=False).loss.backward()
        m.zero_grad(set_to_none=True)

    times = interleaved({n: (lambda m=m: step(m)) for n, m in models.items()}, rounds=args.ckpt_rounds, iters=1, warmup=1)
    none_bytes = out["policies"]["none"]["saved_for_backward_bytes"]
    for name, s in times.items():
        p = out["policies"][name]
        p["saved_reduction_vs_none"] = 1 - p["saved_for_backward_bytes"] / none_bytes
        p["step_s_median"] = statistics.median(s)
        p["step_time_ratio_vs_none"] = ratio_stats(s, times["none"])  # per round: this policy's step ÷ none's
        p["raw_step_s"] = s
        log(f"  recompute={name:9s} saved {p['saved_for_backward_bytes'] / 2**20:8.1f} MiB "
            f"(-{p['saved_reduction_vs_none'] * 100:.0f}%), backward {p['backward_flops'] / 1e9:.1f} GFLOP, "
            f"step {p['step_s_median']:.3f} s (x{p['step_time_ratio_vs_none']['median']:.2f})")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-steps", type=int, default=400)
    parser.add_argument("--seq", type=int, default=128, help="sequence length for training and evaluation")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--eval-samples", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--ckpt-batch", type=int, default=4)
    parser.add_argument("--ckpt-seq", type=int, default=256)
    parser.add_argument("--ckpt-rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    log = print
    t0 = time.time()
    log("training the BERT-base-sized classifier on the synthetic task …")
    model, training = train_classifier(args.train_steps, args.seq, log)
    log("inference variants …")
    inference = bench_inference(model, args, log)
    log("activation checkpointing …")
    checkpointing = bench_checkpointing(args, log)
    report = {
        "benchmark": "recipes_cpu",
        "reproduce": "python benchmarks/recipes_cpu.py",
        "training": training,
        "inference": inference,
        "checkpointing": checkpointing,
        "wall_s": time.time() - t0,
        "environment": environment(with_torch=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
