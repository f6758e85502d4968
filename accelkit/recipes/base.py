"""The shape every optimization technique shares: it says whether the recipe asks for it, what it needs
from the device (a refusal names what is missing and what to change), and how it transforms a model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelkit.core import Recipe, UserError
from accelkit.hardware.device import resolve_device

if TYPE_CHECKING:
    import torch


class RecipeRefused(UserError):
    """A technique cannot run on this device/model; the message says why and what to change."""


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What the techniques need to know about the target device."""

    type: str  # "cpu", "cuda" or "meta" (no storage: the bench counts FLOPs there; no hardware feature)
    name: str
    capability: tuple[int, int] | None = None  # CUDA compute capability; None on CPU
    is_rocm: bool = False
    arch: str = ""  # ROCm gcnArchName, e.g. gfx942 for MI300

    @property
    def is_cuda(self) -> bool:
        return self.type == "cuda"

    def sm_at_least(self, major: int, minor: int = 0) -> bool:
        return self.is_cuda and not self.is_rocm and self.capability is not None and self.capability >= (major, minor)

    @property
    def is_mi300_class(self) -> bool:
        return self.is_rocm and self.arch.startswith("gfx94")

    @property
    def torch_device(self) -> str:
        return "cuda" if self.is_cuda else "cpu"


def device_info(device: str | torch.device | None = None) -> DeviceInfo:
    """Describe ``device`` (default: the first GPU if any, else the CPU). Besides meta, the name goes through
    ``resolve_device`` (auto, cpu, cuda, cuda:N), so a device the techniques cannot target (tpu, mps, xpu, a GPU
    this torch build or machine lacks) is a one-line UserError, not torch's error or a silent CPU."""
    import torch

    if str(device) == "meta":
        return DeviceInfo(type="meta", name="meta")
    dev = torch.device(resolve_device("auto" if device is None else str(device)))
    if dev.type != "cuda":
        return DeviceInfo(type="cpu", name="cpu")
    props = torch.cuda.get_device_properties(dev)
    return DeviceInfo(
        type="cuda", name=props.name, capability=(props.major, props.minor),
        is_rocm=torch.version.hip is not None, arch=getattr(props, "gcnArchName", "") or "",
    )


@dataclass(slots=True)
class ApplyContext:
    """Everything a technique may use while applying: the device, example inputs, the mode."""

    device: DeviceInfo
    example_inputs: tuple[Any, ...] | None = None
    training: bool = False
    emulate_fp8: bool = False
    notes: list[str] = field(default_factory=list)  # what was done, in order, for logs and reports


class Technique:
    """One optimization. Subclasses set ``name`` and override the three methods."""

    name: str = "technique"

    def wanted(self, recipe: Recipe) -> bool:
        """Does this recipe ask for the technique?"""
        raise NotImplementedError

    def refusal(self, recipe: Recipe, ctx: ApplyContext) -> str | None:
        """None if it can run here, else one sentence: what is missing and what to change."""
        return None

    def model_refusal(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> str | None:
        """None if ``model`` has something this technique transforms, else why not. ``apply`` asks every wanted
        technique before it applies any, so a model that would change nothing is refused while still untouched."""
        return None

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        """Transform ``model`` (in place or by wrapping) and return the model to use."""
        raise NotImplementedError


class _RenameKeys:
    """A state-dict hook that renames the keys under ``prefix + old`` to ``prefix + new`` in place, keeping their
    order. A class, not a closure: a model with the hook still pickles (``torch.save(model)``)."""

    def __init__(self, old: str, new: str, *, subtree: bool):
        self.old, self.new, self.subtree = old, new, subtree

    def __call__(self, module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        old, new = prefix + self.old, prefix + self.new

        def renamed(key: str) -> str:
            hit = key.startswith(old) if self.subtree else key == old
            return new + key[len(old):] if hit else key

        items = list(state_dict.items())
        if any(renamed(key) != key for key, _ in items):
            state_dict.clear()  # (a state_dict's _metadata is an attribute: it stays)
            state_dict.update((renamed(key), value) for key, value in items)


def keep_state_dict_keys(module: torch.nn.Module, stored: str, shown: str = "") -> None:
    """Make ``module.state_dict()`` name what the module keeps under ``stored`` (relative to it) as ``shown``, and
    ``load_state_dict`` take those names back, as torch's ``checkpoint_wrapper`` does for the module it wraps: a
    wrapper (``stored='inner.'``) or a parametrized weight (``'parametrizations.weight.original'`` → ``'weight'``)
    then saves and loads the keys of the model as it was built. (found in review: after a recompute or autocast
    wrapper, or fp8 training's weight cast, ``save_pretrained`` wrote keys the architecture lacks, and
    ``from_pretrained`` re-initialised those weights — the training was lost.) A ``stored`` ending in '.' renames
    every key under it, else the one key."""
    subtree = stored.endswith(".")
    module.register_state_dict_post_hook(_RenameKeys(stored, shown, subtree=subtree))  # type: ignore[no-untyped-call]
    module.register_load_state_dict_pre_hook(_RenameKeys(shown, stored, subtree=subtree))  # type: ignore[no-untyped-call]
