"""A `--module` workload for tests/integration/test_progress_and_noise.py: importing torchao prints its
known-harmless load failures (on a CPU build), and the factory then raises two real warnings that must
still reach the user."""

import logging
import warnings


def factory():
    import torch
    import torchao.quantization  # noqa: F401 — the import is the point: torchao logs its .so load failures

    logging.getLogger("torchao").warning("torchao: a real warning that must still show")
    warnings.warn("a real UserWarning from the user's model", UserWarning, stacklevel=1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    return model, (torch.randn(8, 16),)
