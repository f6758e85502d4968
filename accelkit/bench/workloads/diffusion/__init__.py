"""The text-to-image workload (``diffusion``): its config and class, the phase timer and the image accuracy gate."""

from accelkit.bench.workloads.diffusion.workload import Diffusion, DiffusionConfig

__all__ = ["Diffusion", "DiffusionConfig"]
