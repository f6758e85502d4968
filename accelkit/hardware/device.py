"""Which torch device a command runs on: the one place ``--device`` values are read.

``auto`` takes the first GPU torch sees (CUDA, or ROCm through the same API), else the CPU; ``cuda`` without an
index takes ``index`` (a distributed rank passes its LOCAL_RANK); ``cuda:N`` is checked against the devices
torch sees. Anything else is refused with the values that work — before a model is built or memory allocated.
"""

from __future__ import annotations

from accelkit.core.errors import UserError


def check_device_name(name: str) -> str:
    """``name`` as :func:`resolve_device` reads it (stripped, lower case), or the same UserError it raises for a name
    of no accepted shape — without importing torch (~2 s), so a command can refuse `--device nope` before it says
    it is starting. Whether a cuda device exists (cuda:3 on a machine with one GPU) needs torch: resolve_device."""
    name = name.strip().lower()
    if name in ("auto", "cpu"):
        return name
    kind, _, number = name.partition(":")
    if kind != "cuda" or (number and not number.isdigit()):
        raise UserError(f"device {name!r} is not valid; use auto, cpu, cuda or cuda:N")
    return name


def resolve_device(name: str, *, index: int = 0) -> str:
    """``name`` ('auto', 'cpu', 'cuda', 'cuda:N') → the device string torch takes, e.g. 'cuda:0' or 'cpu'."""
    name = check_device_name(name)  # a malformed name is refused before torch's import
    if name == "cpu":
        return "cpu"
    import torch

    has_gpu = torch.cuda.is_available()
    if name == "auto":
        name = "cuda" if has_gpu else "cpu"
    if name == "cpu":
        return "cpu"
    _, _, number = name.partition(":")
    if not has_gpu:
        raise UserError(f"device {name!r} was asked for but torch sees no CUDA/ROCm device; use --device cpu "
                        "(or install a CUDA/ROCm build of torch)")
    count = torch.cuda.device_count()
    n = int(number) if number else index
    if n >= count:
        raise UserError(f"device 'cuda:{n}' does not exist: torch sees {count} GPU(s) (cuda:0 … cuda:{count - 1})")
    return f"cuda:{n}"


def free_memory_bytes(device: str) -> int:
    """Bytes free on ``device`` (a resolved name: 'cpu', 'cuda', 'cuda:N'): the GPU's free memory, or the host's
    available RAM for the CPU — what a run may still allocate there."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)
