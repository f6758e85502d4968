"""The code `accelkit tune … --nproc-per-node N` prints for a compression runs as pasted on 2 gloo ranks (the
backend tune itself measured on here), with a model above 1 MiB of gradients (2+ DDP buckets). torch's hooks as
registered directly failed there: DDP refuses `bf16_compress_hook` without CUDA + NCCL 2.10 (TypeError), and
PowerSGD's P/Q all-reduces from two buckets interleave differently on the ranks and gloo aborts (SIGABRT).

One program on two ranks pastes every snippet in turn, each into a fresh DDP model that trains 8 steps (one start of
the interpreter, forked into the two ranks, and of the process group for all of them); each case's test reads its own
lines."""

import json
import subprocess
import sys
import textwrap

import pytest

from accelkit.bench.variants import Variant
from accelkit.tune.compression import CANDIDATES, compression_snippet

PROGRAM = textwrap.dedent('''
    import gc
    import json
    import sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from accelkit.distributed.process_group import destroy_process_group, init_process_group

    def main(rank, rendezvous, snippets):
        torch.set_num_threads(1)
        init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
        for case, snippet in snippets.items():
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
            assert torch.isfinite(weights).all() and torch.equal(gathered[0], gathered[1]), f"{case}: ranks disagree"
            print(f"rank {rank}: {case}: 8 steps ok", flush=True)
            del ddp_model, model, optimizer
            gc.collect()
        destroy_process_group()

    if __name__ == "__main__":
        # forked from this interpreter, which has imported torch and done nothing else: the ranks need not import
        # it again (how they start is not what is tested; each starts and ends its own process group)
        mp.start_processes(main, args=(sys.argv[1], json.loads(sys.stdin.read())), nprocs=2, start_method="fork")
''')

CASES = [c for c in CANDIDATES if c[0] != "fp16"]  # fp16 is refused without a loss scale


def _snippet(kind: str, rank: int) -> str:
    variant = Variant(grad_compression=kind, **({"powersgd_rank": rank} if kind == "powersgd" else {}))  # type: ignore[arg-type]
    return compression_snippet(variant.recipe(training=True))


@pytest.fixture(scope="module")
def pasted(tmp_path_factory):
    """Every case's snippet pasted in turn into the program on two gloo ranks: (its snippets, the finished run)."""
    tmp = tmp_path_factory.mktemp("snippets")
    snippets = {f"{kind}-{rank}": _snippet(kind, rank) for kind, rank in CASES}
    script = tmp / "train.py"
    script.write_text(PROGRAM)
    proc = subprocess.run([sys.executable, str(script), str(tmp / "rendezvous")], input=json.dumps(snippets),
                          text=True, capture_output=True, timeout=300)
    return snippets, proc


@pytest.mark.parametrize("kind,rank", CASES)
def test_the_printed_snippet_trains_on_two_gloo_ranks(pasted, kind, rank):
    snippets, proc = pasted
    case = f"{kind}-{rank}"
    assert proc.returncode == 0, f"{snippets[case]}\n---\n{proc.stderr[-3000:]}"
    assert proc.stdout.count(f": {case}: 8 steps ok") == 2, proc.stdout
