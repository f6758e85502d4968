"""`custom`: any model from ``--module package.module:factory``.

The factory takes no arguments and returns ``(model, example_inputs)`` or ``(model, example_inputs,
loss_fn)`` (or a dict with those keys). ``example_inputs`` is a tensor, a tuple of positional tensors or a
dict of keyword tensors; with a ``loss_fn(output) -> scalar`` the step is a training step (SGD), without
one it is inference. Items per step default to the batch dimension (dim 0) of the input that carries the batch
(:func:`batch_input`).

Every variant gets a model of its own, and none changes the model the factory returned to someone else: the factory
is called once per variant (after the seed is set), a model it returned before (a module-level ``MODEL``) is
deep-copied, and FLOPs are counted on a meta-device copy (:func:`meta_copy`).
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import os
import sys
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accelkit.bench.variants import Variant, apply
from accelkit.bench.workloads.base import MAX_SIZE, BenchWorkload, Prepared, Step, evaluate_fn, run_in, train_step
from accelkit.core import UserError
from accelkit.core.spec import Spec, spec_field


def _split_target(target: str, what: str) -> tuple[str, str]:
    """'package.module:function' → (module, function), or the UserError that says what to write."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"{what} {target!r} is not valid; write package.module:factory")
    if module_name.startswith("."):  # import_module raised a TypeError for it, reported as the user's module failing
        raise UserError(f"{what} {target!r} names a relative module; write its full name, package.module:factory")
    return module_name, attr


def check_target(target: str, what: str = "--module") -> None:
    """A target :func:`load_factory` would refuse for its shape or for a top-level module that is nowhere (the
    working directory counted, as it counts it), refused in its words without importing anything: a command calls
    this before it imports torch (~2 s) and says it is starting. A module that is there is imported later, by the
    run."""
    module_name, _ = _split_target(target, what)
    top = module_name.split(".")[0]
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        found = importlib.util.find_spec(top) is not None  # a top-level name: finds it, runs none of its code
    except (ImportError, ValueError):
        found = True
    finally:
        if added:
            sys.path.remove(cwd)
    if not found:
        raise UserError(f"{what} {target!r}: cannot import {module_name!r} (No module named {top!r})")


def load_factory(target: str, *, what: str = "--module") -> Callable[[], Any]:
    """'package.module:function' → the function; a bad target is a UserError that says what to write.

    The working directory is importable, first, as under ``python -m`` (and uvicorn's ``--app-dir .``): a
    ``mymodels.py`` beside the user is found without ``PYTHONPATH=.``."""
    module_name, attr = _split_target(target, what)
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"{what} {target!r}: cannot import {module_name!r} ({exc})") from exc
    except Exception as exc:  # the user's module failed as it ran (a SyntaxError, NameError, raise): theirs, exit 2
        raise UserError(f"{what} {target!r}: importing {module_name} raised {_import_failure(exc)}; fix the module "
                        f"(`python -c 'import {module_name}'` shows the traceback)") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UserError(f"{what} {target!r}: {module_name} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]


def _import_failure(exc: Exception) -> str:
    """"NameError: name 'x' is not defined (/path/mymodels.py, line 2)": what a module raised as it was imported, and
    where — the innermost module-level line that ran (a SyntaxError: the line that does not parse). A SyntaxError,
    NameError or raise in the user's module was reported as an accelkit internal error (found in review)."""
    if isinstance(exc, SyntaxError):
        return f"{type(exc).__name__}: {exc.msg} ({exc.filename}, line {exc.lineno})"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.name == "<module>" and not f.filename.startswith("<")]
    lines = str(exc).splitlines()
    where = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {lines[0] if lines else ''}{where}"


def meta_copy(model: Any) -> Any:
    """``model`` on the meta device, ``model`` itself untouched: a copy whose parameters and buffers are meta tensors
    of their shapes (no data is copied; tied weights stay tied). ``model.to("meta")`` emptied the factory's own
    object: one that returns a module-level model then had only meta weights, and every variant failed
    ("Cannot copy out of meta tensor") (found in review)."""
    import torch

    memo: dict[int, Any] = {}
    for tensor in (*model.parameters(), *model.buffers()):
        meta = tensor.detach().to("meta")
        memo[id(tensor)] = (torch.nn.Parameter(meta, requires_grad=tensor.requires_grad)
                            if isinstance(tensor, torch.nn.Parameter) else meta)
    return copy.deepcopy(model, memo)


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomConfig(Spec):
    """A user model."""

    module: str = spec_field(doc="'package.module:factory' returning (model, example_inputs[, loss_fn]).")
    items_per_step: int | None = spec_field(None, min=1, max=MAX_SIZE, doc="Items one step processes; None = first input's dim 0.")
    lr: float = spec_field(1e-3, min=0.0, finite=True, doc="SGD learning rate when a loss_fn makes it a training step.")


#: keyword inputs that carry the batch in transformers' models (text, images, audio, embeddings), in that order
BATCH_KWARGS = ("input_ids", "pixel_values", "input_values", "inputs_embeds")


def batch_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, str] | None:
    """(dim 0, which input) of the input whose dim 0 is the batch: a keyword one of :data:`BATCH_KWARGS`, else the
    first tensor (positional, then keyword) of two or more dimensions — a 1-D one is as often a mask, lengths or a
    scale as a batch: ``{"mask": ones(1), "x": randn(6, 32)}`` made every step one item — else the first 1-D one.
    None: no input has a dimension."""
    import torch

    for name in BATCH_KWARGS:
        value = kwargs.get(name)
        if isinstance(value, torch.Tensor) and value.dim() >= 1:
            return int(value.shape[0]), f"keyword input {name!r}"
    named = [(f"positional input {i}", v) for i, v in enumerate(args)]
    named += [(f"keyword input {k!r}", v) for k, v in kwargs.items()]
    tensors = [(which, v) for which, v in named if isinstance(v, torch.Tensor) and v.dim() >= 1]
    ranked = sorted(tensors, key=lambda t: t[1].dim() < 2)  # stable: ≥ 2-D first, each kept in order
    return (int(ranked[0][1].shape[0]), ranked[0][0]) if ranked else None


def _unpack(made: Any, target: str) -> tuple[Any, Any, Any]:
    if isinstance(made, dict):
        inputs = made.get("inputs", made.get("example_inputs"))
        if "model" not in made or inputs is None:  # a misspelt key read as None: every variant failed, exit 1
            raise UserError(f"--module {target!r} returned a dict with the keys {', '.join(map(repr, made)) or 'none'}; "
                            "it needs 'model' and 'inputs' (or 'example_inputs'), and 'loss_fn' to train")
        return made["model"], inputs, made.get("loss_fn")
    if isinstance(made, (tuple, list)) and len(made) in (2, 3):
        return made[0], made[1], made[2] if len(made) == 3 else None
    raise UserError(f"--module {target!r} must return (model, example_inputs[, loss_fn]); got {type(made).__name__}")


def _check_inputs(inputs: Any, target: str) -> None:
    """example_inputs as the step takes them: a tensor, a tuple or list of positional ones, a dict of keyword ones."""
    import torch

    if not isinstance(inputs, (torch.Tensor, dict, tuple, list)):
        raise UserError(f"--module {target!r}: example_inputs is a {type(inputs).__name__}; give a tensor, a tuple of "
                        "tensors or a dict of keyword tensors")


def _check_call(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], target: str) -> None:
    """Refuse (one line, exit 2) example_inputs that ``model.forward`` cannot take — the Python error every variant
    then raised in its first call (``FAILED fp32 (first call): TypeError: Linear.forward() missing 1 required
    positional argument``, once per variant, exit 1). A model with forward pre-hooks (which may supply or rewrite
    the inputs) is left to its first call."""
    from torch.nn.modules import module as torch_module

    if getattr(model, "_forward_pre_hooks", None) or torch_module._global_forward_pre_hooks:
        return
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):  # a builtin or C forward: nothing to check here
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        given = f"{len(args)} positional" + (f" and keyword {', '.join(map(repr, kwargs))}" if kwargs else "")
        raise UserError(f"--module {target!r}: the example inputs ({given}) do not fit "
                        f"{type(model).__name__}.forward{signature}: {exc}; return the inputs forward takes (a "
                        "tensor, a tuple of positional tensors, or a dict of keyword ones)") from None


class Custom(BenchWorkload):
    name = "custom"
    config_cls = CustomConfig
    summary = "your model: --module package.module:factory"

    def __init__(self, config: Spec):
        super().__init__(config)
        #: (a loss_fn given, a Conv2d in the model), from the factory's first call: the flags, not its model, which
        #: kept here stayed alive beside every variant's own (two copies during each measured forward; found in review)
        self._facts: tuple[bool, bool] | None = None
        #: that first call's result until the first prepare: a meta-device one (counting FLOPs, where weights and
        #: inputs do not matter) takes it instead of calling the factory again; any other drops it
        self._spare: tuple[Any, Any, Any] | None = None
        #: id → weak reference of each model the factory has returned: one returned again is the factory's own
        #: (shared); by id, as a model's class may define its own ``==`` or none of ``hash``
        self._returned: dict[int, weakref.ref[Any]] = {}

    def _first(self) -> tuple[bool, bool]:
        """``_facts``, from one call of the factory (its result kept as ``_spare`` for the first prepare)."""
        import torch

        if self._facts is None:
            self._spare = self._make(copy_shared=False)
            model, _, loss_fn = self._spare
            self._facts = (loss_fn is not None, any(isinstance(m, torch.nn.Conv2d) for m in model.modules()))
            self._check_first(model, self._spare[1], loss_fn)
        return self._facts

    def _check_first(self, model: Any, inputs: Any, loss_fn: Any) -> None:
        """What the factory's first result says about the flags and the step, refused in one line (exit 2) before
        any variant runs: each of these failed every variant (exit 1) or was measured as something else."""
        import torch

        target = self.config.module
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()
                         if p.is_floating_point() and p.dtype != torch.float32})
        if dtypes:  # its "fp32" variant ran bf16 matmuls and read MFU 329% against the fp32 peak
            raise UserError(f"--module {target!r} returns a model with {', '.join(dtypes)} parameters; every variant "
                            "starts from fp32 weights (--precision bf16/fp16 autocast over them, and MFU divides by "
                            "that precision's peak): return the model in fp32 (model.float()) and choose the precision "
                            "with --precision")
        if loss_fn is not None and not callable(loss_fn):  # every variant FAILED in its first call, exit 1
            raise UserError(f"--module {target!r} returns a loss_fn that is not callable ({type(loss_fn).__name__}); "
                            "give a function loss_fn(output) -> scalar tensor to train, or return (model, "
                            "example_inputs) to measure inference")
        if loss_fn is not None and not any(p.requires_grad for p in model.parameters()):
            # SGD refused an empty parameter list, or the loss had no grad_fn: every variant FAILED, exit 1
            has = "only frozen parameters (requires_grad=False)" if any(True for _ in model.parameters()) \
                else "no parameters"
            raise UserError(f"--module {target!r} returns a loss_fn (a training step) but a model with {has}, so SGD "
                            "has nothing to train; return a model with trainable parameters, or return (model, "
                            "example_inputs) without the loss_fn to measure inference")
        default_lr = CustomConfig.__dataclass_fields__["lr"].default
        if loss_fn is None and self.config.lr != default_lr:  # an inference step has no optimizer to take it
            raise UserError(f"--lr {self.config.lr:g} sets the SGD step of a training run, but {target} returns no "
                            "loss_fn, so its step is inference; drop --lr, or return (model, example_inputs, loss_fn) "
                            "to train")
        args = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs) if isinstance(inputs, (tuple, list)) \
            else ()
        _check_call(model, args, inputs if isinstance(inputs, dict) else {}, target)
        if self.config.items_per_step is None:
            found = batch_input(args, inputs if isinstance(inputs, dict) else {})
            if found is not None and found[0] == 0:  # items per step 0: throughput divided by it (ZeroDivisionError)
                raise UserError(f"--module {target!r}: the batch input ({found[1]}) has 0 rows, so a step processes "
                                "no items; give example inputs with a batch, or --items-per-step")

    def _make(self, *, copy_shared: bool = True) -> tuple[Any, Any, Any]:
        """Call the factory; with ``copy_shared``, a model it returned before (and holds, e.g. a module-level
        ``MODEL``) comes back as a deep copy, so that a variant's recipe, device move or training steps never reach
        the factory's object, nor through it the next variant."""
        import torch

        target = self.config.module
        factory = load_factory(target)
        try:
            made = factory()
        except Exception as exc:  # the user's code: one line naming the target and what a factory must be
            raise UserError(f"--module {target!r}: calling {target.partition(':')[2]}() raised {type(exc).__name__}: "
                            f"{exc}; the factory takes no arguments and returns (model, example_inputs[, loss_fn])"
                            ) from exc
        model, inputs, loss_fn = _unpack(made, target)
        _check_inputs(inputs, target)  # here, at the first call: one line, exit 2 — not every variant FAILED, exit 1
        if not isinstance(model, torch.nn.Module):
            raise UserError(f"--module {self.config.module!r} returned a {type(model).__name__}, not a torch nn.Module")
        seen = self._returned.get(id(model))
        if seen is None or seen() is not model:  # a new model (an id a freed one had is no match)
            self._returned[id(model)] = weakref.ref(model)
        elif copy_shared:
            try:
                model = copy.deepcopy(model)
            except Exception as exc:
                raise UserError(f"--module {target!r} returns the same model object on every call and it cannot be "
                                f"copied ({type(exc).__name__}: {exc}); build the model inside the factory") from exc
        return model, inputs, loss_fn

    @property
    def is_training(self) -> bool:
        return self._first()[0]

    @property
    def is_cnn(self) -> bool:  # type: ignore[override]
        """True when the user's model has a convolution (an nn.Conv2d): tune then tries the CNN recipes
        (channels_last, and Conv-BN folding for inference). Always False before, so they were never tried."""
        return self._first()[1]

    @property
    def task(self) -> str:  # type: ignore[override]
        """train when the factory gave a loss_fn, else infer."""
        return "train" if self.is_training else "infer"

    @property
    def label(self) -> str:
        return f"custom {self.config.module}" + (" train" if self.is_training else "")

    def refusal(self, variant: Variant, device: str) -> str | None:
        if variant.channels_last:
            return None  # the user's model may well be a CNN
        return super().refusal(variant, device)

    def prepare(self, variant: Variant, device: str, *, seed: int) -> Prepared:
        import torch

        torch.manual_seed(seed)
        spare, self._spare = self._spare, None
        if device == "meta":  # FLOPs: a meta copy, the factory's model untouched (its first result will do)
            model, inputs, loss_fn = spare or self._make(copy_shared=False)
            model = meta_copy(model)
        else:
            del spare
            model, inputs, loss_fn = self._make()  # a model of this variant's own, made after the seed
        model = model.to(device)
        def to(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            if variant.channels_last and value.dim() == 4:
                return value.to(device).contiguous(memory_format=torch.channels_last)
            return value.to(device)

        args: tuple[Any, ...] = ()
        kwargs: dict[str, Any] = {}
        if isinstance(inputs, torch.Tensor):
            args = (to(inputs),)
        elif isinstance(inputs, dict):
            kwargs = {k: to(v) for k, v in inputs.items()}
        elif isinstance(inputs, (tuple, list)):
            args = tuple(to(v) for v in inputs)
        else:  # (checked as the factory returned it: _check_inputs)
            raise AssertionError(type(inputs))
        notes: list[str] = []  # what the recipe did, and which input's dim 0 the items are, for the run's notes
        items = self.config.items_per_step
        if items is None:
            found = batch_input(args, kwargs)
            num_tensors = sum(isinstance(v, torch.Tensor) for v in (*args, *kwargs.values()))
            if found is None:
                items = 1
                notes.append("no input has a batch dimension: 1 item per step (give --items-per-step)")
            else:
                items, which = found
                if num_tensors > 1:  # one input: no doubt which is the batch
                    notes.append(f"items per step: {items}, dim 0 of {which} (--items-per-step sets another)")
        training = loss_fn is not None
        model = apply(model.train(training), variant, example_inputs=args or None, device=device, train=training,
                      notes=notes)

        def forward() -> Any:
            return model(*args, **kwargs)

        if training:
            optimizer = torch.optim.SGD(model.parameters(), lr=self.config.lr)
            step = Step("train step", train_step(model, optimizer, lambda: loss_fn(forward()), variant, device),
                        items, "samples", returns_loss=True)
        else:
            step = Step("forward", run_in(variant, device, forward, inference=True), items, "samples")
        return Prepared(steps=[step], evaluate=evaluate_fn(model, variant, device, forward), notes=notes)
