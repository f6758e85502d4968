"""`hw probe`'s memory pre-check budgets what the probe really holds at once: every tensor the probe's ops
create is counted while it lives (a torch dispatch mode), not RSS or time."""

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from accelkit.hardware.probe import ProbeConfig, peak_bytes, probe
from accelkit.timing import LoopConfig

MiB = 1 << 20


class LiveBytes(TorchDispatchMode):
    """The most bytes held at once by tensors that ops created (one count per storage), by op."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, int] = {}
        self.peak = 0

    def _forget(self, ptr: int) -> None:
        self.live.pop(ptr, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                ptr = t.untyped_storage().data_ptr()
                if ptr and ptr not in self.live:
                    self.live[ptr] = t.untyped_storage().nbytes()
                    weakref.finalize(t, self._forget, ptr)
        self.peak = max(self.peak, sum(self.live.values()))
        return out


def test_probe_holds_at_most_what_the_pre_check_budgets(monkeypatch):
    # before: src and dst of the copy stayed alive while the elementwise probe allocated three more buffers of
    # the same size, so a 1 GiB --copy-size peaked at 5 GiB against a 2 GiB budget
    monkeypatch.setattr(LoopConfig, "quick", classmethod(lambda cls: LoopConfig(
        warmup_iterations=1, min_iterations=1, min_time_s=0.0, max_iterations=1, warmup_time_s=0.0)))
    copy = 64 * MiB
    config = ProbeConfig(device="cpu", dtypes=("fp32",), quick=True, matmul_size=64, copy_bytes=copy)
    with LiveBytes() as mode:
        probe(config)
    budget = peak_bytes("cpu", 64, copy)
    assert 3 * copy <= mode.peak <= budget  # the elementwise add's a, b, c is the largest phase
    assert budget - mode.peak < 8 * MiB  # and the budget is that phase, not a multiple of it
