"""The code `accelkit tune … --nproc-per-node N` prints for a compression runs as pasted on 2 gloo ranks (the
backend tune itself measured on here), with a model above 1 MiB of gradients (2+ DDP buckets). torch's hooks as
registered directly failed there: DDP refuses `bf16_compress_hook` without CUDA + NCCL 2.10 (TypeError), and
PowerSGD's P/Q all-reduces from two buckets interleave differently on the ranks and gloo aborts (SIGABRT)."""

import subprocess
import sys
import textwrap

import pytest

from accelkit.bench.variants import Variant
from accelkit.tune.compression import CANDIDATES, compression_snippet

PROGRAM = textwrap.dedent('''
    import sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from accelkit.distributed.process_group import destroy_process_group, init_process_group

    def main(rank, rendezvous, snippet):
        torch.set_num_threads(1)
        init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(16)])  # 16.8 MB of fp32 gradients
        ddp_model = torch.nn.parallel.DistributedDataParallel(model)
        exec(snippet, {"ddp_model": ddp_model, "torch": torch})
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=1e-3)
        for step in range(8):  # PowerSGD compresses from step 2 (its start iteration)
            ddp_model(torch.randn(4, 512, generator=torch.Generator().manual_seed(step * 2 + rank))).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        gathered = [torch.empty_like(weights) for _ in range(2)]
        dist.all_gather(gathered, weights)
        assert torch.isfinite(weights).all() and torch.equal(gathered[0], gathered[1]), "ranks disagree"
        print(f"rank {rank}: 8 steps ok", flush=True)
        destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(main, args=(sys.argv[1], sys.stdin.read()), nprocs=2)
''')


@pytest.mark.parametrize("kind,rank", [c for c in CANDIDATES if c[0] != "fp16"])  # fp16 is refused without a loss scale
def test_the_printed_snippet_trains_on_two_gloo_ranks(tmp_path, kind, rank):
    variant = Variant(grad_compression=kind, **({"powersgd_rank": rank} if kind == "powersgd" else {}))  # type: ignore[arg-type]
    snippet = compression_snippet(variant.recipe(training=True))
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "rendezvous")], input=snippet, text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, f"{snippet}\n---\n{proc.stderr[-3000:]}"
    assert proc.stdout.count("8 steps ok") == 2
