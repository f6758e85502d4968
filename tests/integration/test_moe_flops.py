"""MoE FLOPs: transformers 5 runs Mixtral-style experts through ``aten._grouped_mm``, which torch's
FlopCounterMode has no formula for — the bench counted attention and the router only (2.46 vs the planner's 4.82
MFLOP/token). ``count_flops`` counts every grouped GEMM shape, forward and backward, on CPU and on the meta device."""

import json

import pytest
import torch

from accelkit.bench.metrics import count_flops, meta_grouped_mm
from accelkit.models import resolve_model
from accelkit.models.build import build_model
from accelkit.plan import flops as F

G, K, N = 4, 16, 8
OFFS = [3, 5, 9, 12]  # cumulative rows per group; the last is the total M
M = OFFS[-1]


def _grouped(device: str):
    a = torch.randn(M, K, device=device, requires_grad=True)  # (M_total, K): rows sorted by expert
    b = torch.randn(G, K, N, device=device, requires_grad=True)  # (G, K, N): one weight per expert
    offs = torch.tensor(OFFS, dtype=torch.int32, device=device)

    def forward():
        return torch._grouped_mm(a, b, offs=offs)

    def train():
        out = forward()
        out.backward(torch.randn_like(out))  # dA: (M, N)×(G, N, K); dB: (K, M)×(M, N) → (G, K, N)

    return forward, train


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_grouped_mm_forward_and_backward_are_counted(device):
    forward, train = _grouped(device)
    with meta_grouped_mm():  # the meta kernel alone refuses fp32 ("Expected inputs of BF16 type")
        assert count_flops(forward) == 2 * M * K * N
        assert count_flops(train) == 3 * 2 * M * K * N  # forward + dA + dB, each 2·M·K·N


def test_batched_and_ragged_n_grouped_mm():
    a3, b3 = torch.randn(G, 5, K), torch.randn(G, K, N)  # plain batched: (G, M, K) × (G, K, N)
    assert count_flops(lambda: torch._grouped_mm(a3, b3)) == 2 * G * 5 * K * N
    b2 = torch.randn(K, 4 * G)  # ragged N: (G, M, K) × (K, N_total) → (M, N_total), group g takes its N slice
    offs = torch.tensor([4, 8, 12, 16], dtype=torch.int32)
    assert count_flops(lambda: torch._grouped_mm(a3, b2, offs=offs)) == 2 * 5 * K * 4 * G


MIXTRAL = {
    "model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 1, "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": 512, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False, "sliding_window": None, "router_jitter_noise": 0.0,
}


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_mixtral_training_flops_match_the_planner(tmp_path, device):
    """Counted model FLOPs of a training step of a 4-expert top-2 Mixtral equal the planner's 6·active·tokens +
    attention (before: about half — the experts' matmuls were missing)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXTRAL))
    spec = resolve_model(str(path))
    model = build_model(spec, device=device).train()
    model.set_attn_implementation("eager")
    batch, seq = 2, 32
    ids = torch.randint(0, spec.vocab_size, (batch, seq)).to(device)

    def step():
        model(input_ids=ids, labels=ids).loss.backward()

    with meta_grouped_mm():
        counted = count_flops(step)
    assert counted == pytest.approx(F.training_flops(spec, batch=batch, seq=seq), rel=0.03)


def test_transformers_grouped_mm_fallback_is_counted():
    """transformers' own loop-of-mm custom op (taken where ``_grouped_mm`` cannot run) hides its matmuls too."""
    pytest.importorskip("transformers.integrations.moe")  # registers torch.ops.transformers.grouped_mm_fallback
    x, w = torch.randn(M, K, requires_grad=True), torch.randn(G, K, N, requires_grad=True)
    offs = torch.tensor(OFFS)

    def train():
        out = torch.ops.transformers.grouped_mm_fallback(x, w, offs)
        out.backward(torch.randn_like(out))

    assert count_flops(lambda: torch.ops.transformers.grouped_mm_fallback(x, w, offs)) == 2 * M * K * N
    assert count_flops(train) == 3 * 2 * M * K * N


def test_the_bench_counts_an_moe_on_the_meta_device():
    """step_flops' first (seeding) call ran outside meta_grouped_mm, so the meta count of an MoE still failed on
    the bf16-only meta kernel and fell back to the fp32 variant's device."""
    from accelkit.bench.reference import count_on_meta
    from accelkit.bench.workloads import make_workload

    workload = make_workload("llm-train", {"model": "tiny-mixtral", "batch_size": 2, "seq_len": 16})
    flops, why = count_on_meta(workload, seed=0)
    assert why is None and flops["train step"] > 0, why


def test_the_bench_counts_an_moe_decode_on_the_meta_device():
    """bench llm on an MoE: decode's counted calls ran under meta_grouped_mm but the prefill that fills their cache
    did not, so the meta count failed and the fp32 variant counted on the device ('FLOPs counted on cpu by the fp32
    variant, not on the meta device (RuntimeError: Expected inputs of BF16 type …)'). Both are counted on meta now."""
    from accelkit.bench.reference import count_on_meta
    from accelkit.bench.workloads import make_workload

    workload = make_workload("llm", {"model": "tiny-mixtral", "batch_size": 2, "prompt_len": 16, "output_len": 8})
    flops, why = count_on_meta(workload, seed=0)
    assert why is None, why
    assert flops["prefill"] > 0 and flops["decode"] > 0
