"""Triton kernels of the engine's CUDA path: paged attention, the fused KV-cache write, and the small fused
ops of a decoder layer. Each runs on a CPU under ``TRITON_INTERPRET=1`` (how the tests check them against
the PyTorch reference); import this package only when the Triton path is chosen."""
