"""Layout: one parallel layout and micro-batching choice, and the rules that make it valid."""

from __future__ import annotations

from typing import NamedTuple

from accelkit.core import Cluster, ModelSpec, UserError


class Layout(NamedTuple):
    """How a step is split: dp·tp·pp devices, experts over ep of the dp ranks, ZeRO stage over dp,
    ``micro_batch`` sequences per micro-batch and ``grad_accum`` micro-batches per step and dp rank."""

    dp: int
    tp: int
    pp: int
    ep: int = 1
    zero: int = 0
    micro_batch: int = 1
    grad_accum: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False

    @property
    def num_devices(self) -> int:
        return self.dp * self.tp * self.pp

    def to_dict(self) -> dict[str, object]:
        return self._asdict()


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tp_choices(model: ModelSpec, cluster: Cluster, num_devices: int) -> list[int]:
    """tp that divides the heads and the device count and stays inside the scale-up domain."""
    if not model.is_transformer:
        return [1]
    limit = min(cluster.node_size if cluster.num_devices > 1 else cluster.device.scaleup_domain,
                cluster.device.scaleup_domain)
    return [t for t in divisors(num_devices) if t <= limit and model.num_heads % t == 0]


def pp_choices(model: ModelSpec, num_devices: int) -> list[int]:
    if not model.is_transformer:
        return [1]
    return [p for p in divisors(num_devices) if model.num_layers % p == 0]


def ep_choices(model: ModelSpec, dp: int) -> list[int]:
    if model.num_experts is None:
        return [1]
    return [e for e in divisors(dp) if model.num_experts % e == 0]


def check_user_layout(model: ModelSpec, cluster: Cluster, fixed: dict[str, object], num_devices: int) -> None:
    """Raise UserError for a layout field the user gave that can never work (one sentence, with the fix)."""
    tp, pp, dp, ep = (fixed.get(k) for k in ("tp", "pp", "dp", "ep"))
    heads, layers = model.num_heads, model.num_layers
    if not model.is_transformer:
        for name, value in (("tp", tp), ("pp", pp)):
            if value not in (None, 1):
                raise UserError(f"--{name} {value} is not supported for the CNN {model.name}; it trains data-parallel only")
    if tp is not None:
        if model.is_transformer and heads % tp:  # type: ignore[operator]
            ok = ", ".join(str(d) for d in divisors(heads))
            raise UserError(f"--tp {tp} does not divide the {heads} attention heads of {model.name}; use one of {ok}")
        if tp > cluster.device.scaleup_domain:  # type: ignore[operator]
            raise UserError(f"--tp {tp} exceeds the scale-up domain of {cluster.device.name} "
                            f"({cluster.device.scaleup_domain} devices); tensor parallelism needs the fast fabric")
    if pp is not None and model.is_transformer and pp > layers:  # type: ignore[operator]
        raise UserError(f"--pp {pp} exceeds the {layers} layers of {model.name}; a stage needs at least one layer")
    if ep is not None and ep > 1:
        if model.num_experts is None:
            raise UserError(f"--ep {ep} needs a mixture-of-experts model; {model.name} is dense")
        if model.num_experts % ep:  # type: ignore[operator]
            raise UserError(f"--ep {ep} does not divide the {model.num_experts} experts of {model.name}")
    given = [v for v in (dp, tp, pp) if v is not None]
    product = 1
    for v in given:
        product *= v  # type: ignore[operator]
    if num_devices % product:
        raise UserError(f"dp·tp·pp = {product} does not divide --num-devices {num_devices}")
    if len(given) == 3 and product != num_devices:
        raise UserError(f"dp·tp·pp = {product} but --num-devices is {num_devices}; they must be equal")
    if fixed.get("sequence_parallel") and tp == 1:
        raise UserError("--sequence-parallel needs --tp > 1 (it splits the tensor-parallel group's work)")
