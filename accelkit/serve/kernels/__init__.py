"""Triton kernels of the engine's CUDA path: paged attention, the fused KV-cache write, and the small fused
ops of a decoder layer. Each runs on a CPU under ``TRITON_INTERPRET=1`` (how the tests check them against
the PyTorch reference); import this package only when the Triton path is chosen."""

import os


def _interpreter_problem() -> str | None:
    """Why Triton's interpreter cannot run these kernels here, if it cannot: Triton 3.6's turns a 1-element array
    into an int with ``int(array)``, which NumPy 2.4 refuses (every kernel loop bounded by a loaded length fails)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return None
    import numpy
    import triton

    def major_minor(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())

    if major_minor(triton.__version__) < (3, 7) and major_minor(numpy.__version__) >= (2, 4):
        return (f"TRITON_INTERPRET=1 with triton {triton.__version__} and numpy {numpy.__version__}: this Triton's "
                "interpreter cannot run the engine's kernels with NumPy 2.4 or newer; install triton>=3.7 or "
                "numpy<2.4 (on a GPU the kernels are compiled and this does not apply)")
    return None


if (_problem := _interpreter_problem()) is not None:
    raise ImportError(_problem)
