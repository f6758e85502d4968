"""Hardware recommendation: the same workload on several accelerators, one row each — devices, best layout,
step time, tokens/s, MFU, energy per token, cost and the dominant bottleneck — on a basis they share:

* ``devices`` (the default): the same device count for every hardware — the one given, else the smallest count at
  which every compared device fits. Each device at its own smallest count would plan a 141 GB H200 on one device at
  a memory-bound batch beside an 80 GB H100 on two, and rank it slowest per device for having more memory.
* ``budget``: the same money per hour — each hardware gets the most devices its price buys (default budget: the
  least at which every device fits at its own smallest count).
* ``min-devices``: each hardware at its own smallest count (the memory answer: how few devices hold the job).

Prices: the caller's per hardware, else one price for all (``options.price_per_device_hour``), else the price
catalog (accelkit/hardware/data/prices.csv, with offer, source and date); each row's context says which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from accelkit.core import Cluster, DeviceSpec, UserError, Workload
from accelkit.hardware.prices import catalog_price
from accelkit.plan.calibrate import hardware_key, resolve_hardware
from accelkit.plan.context import PlanContext, make_context
from accelkit.plan.evaluate import Candidate
from accelkit.plan.options import PlanOptions
from accelkit.plan.search import _constraints, _counts, check_arguments, min_devices, search_ctx

CompareBasis = Literal["devices", "budget", "min-devices"]
COMPARE_BASES: tuple[str, ...] = ("devices", "budget", "min-devices")


def drop_from_compare(exc: UserError, name: str, device_name: str, compared: int) -> str:
    """An error of one compared hardware (it starts with its name: no peak for the --precision, no CPU probe), with
    the other way out: drop it from --compare — the fix it gave alone ("choose another --precision") reads as if the
    whole comparison could not run the precision."""
    text = str(exc)
    return f"{text} — or drop {name} from --compare" if compared > 1 and text.startswith(device_name) else text


def compare(workload: Workload, hardware: str | Sequence[str], *, options: PlanOptions | None = None,
            fixed: dict[str, Any] | None = None, global_batch: int | None = None, batch: int | None = None,
            num_devices: int | None = None, scaleout_bandwidth_bytes_per_s: float | None = None,
            basis: CompareBasis = "devices", prices: Mapping[str, float] | None = None,
            budget_per_hour: float | None = None) -> list[tuple[Candidate, PlanContext]]:
    """Best candidate per hardware name, in the order given, on one ``basis`` (module docstring): ``devices``
    (``num_devices``, or the smallest count at which all fit), ``budget`` (``budget_per_hour`` dollars, or the least
    at which all fit) or ``min-devices``. ``prices``: dollars per device-hour by hardware name or alias (``{"h100":
    2.5}``), before ``options.price_per_device_hour`` and the catalog. One name alone (``"h100"``) is one hardware,
    not its letters. Each context's ``compare_basis`` says the basis in words, its ``price_source`` the price's."""
    check_arguments(fixed, global_batch=global_batch, batch=batch, num_devices=num_devices)  # before any hardware
    names = [hardware] if isinstance(hardware, str) else list(hardware)
    if not names:
        raise UserError("compare needs at least one hardware name, e.g. ['h100', 'b200']")
    if basis not in COMPARE_BASES:
        raise UserError(f"compare basis {basis!r} is not valid; choose from {', '.join(COMPARE_BASES)}")
    if num_devices is not None and basis != "devices":
        raise UserError(f"--num-devices {num_devices} gives every hardware the same count; drop it, or drop "
                        f"--compare-basis {basis}")
    if budget_per_hour is not None and basis != "budget":
        raise UserError(f"--budget-per-hour {budget_per_hour:g} applies to --compare-basis budget; add it, or drop "
                        "--budget-per-hour")
    options = options or PlanOptions()
    devices = _devices(names)
    given: dict[str, float] = {}
    given_as: dict[str, str] = {}
    for key, value in (prices or {}).items():
        name = resolve_hardware(key).name
        if name not in {d.name for d in devices}:
            raise UserError(f"--price-per-device-hour names {key} ({name}), which is not in --compare "
                            f"{','.join(names)}; drop it or add it to the list")
        if name in given:  # h100=2.5,h100-sxm5=3: one of the two would be dropped without a word
            raise UserError(f"--price-per-device-hour prices {name} twice ({given_as[name]} and {key}); give it one "
                            "price")
        given[name], given_as[name] = float(value), key
    contexts = []
    for name, device in zip(names, devices, strict=True):
        price, source = _price(device.name, given, options)
        cluster = Cluster(device=device, num_devices=num_devices or 1)
        if scaleout_bandwidth_bytes_per_s is not None:
            cluster = cluster.replace(scaleout_bandwidth_bytes_per_s=scaleout_bandwidth_bytes_per_s)
        try:
            ctx = make_context(workload, cluster, replace(options, price_per_device_hour=price))
        except UserError as exc:
            raise UserError(drop_from_compare(exc, name, device.name, len(devices))) from None
        ctx.price_source = source
        contexts.append(ctx)
    search: dict[str, Any] = dict(fixed=fixed, global_batch=global_batch, batch=batch)
    memo: dict[tuple[int, int | None], Candidate | None] = {}

    def best(i: int, n: int | None) -> Candidate | None:
        """Device i's best candidate on n devices (None: its own smallest count), once per (i, n): the basis search
        and the rows ask for the same ones; None when no layout is valid there (heads, batch)."""
        if (i, n) not in memo:
            try:
                memo[i, n] = search_ctx(contexts[i], num_devices=n, top=1, **search)[0]
            except UserError:
                memo[i, n] = None
        return memo[i, n]

    def fits(i: int, n: int) -> bool:
        found = best(i, n)
        return found is not None and found.fits

    if num_devices is not None:
        counts: list[int | None] = [num_devices] * len(contexts)
        words = f"same device count: {num_devices} each (--num-devices)"
    else:
        mins = [min_devices(ctx, **search)[0] for ctx in contexts]
        if basis == "min-devices":
            counts, words = list(mins), "each hardware at its own smallest device count that fits (--compare-basis min-devices)"
        elif basis == "devices":
            counts, words = _same_count(contexts, mins, fits)
        else:
            counts, words = _same_budget(contexts, mins, budget_per_hour, fits)
    rows = []
    for i, (ctx, n) in enumerate(zip(contexts, counts, strict=True)):
        found = best(i, n) or search_ctx(ctx, num_devices=n, top=1, **search)[0]  # none valid: its error says why
        found.extra["context"].compare_basis = words
        rows.append((found, found.extra["context"]))
    return rows


def _devices(names: list[str]) -> list[DeviceSpec]:
    """The catalog device of each name, refusing one card named twice: two spellings of it (h100,H100-SXM5-80GB) gave
    two identical rows (found in review)."""
    devices = [resolve_hardware(n) for n in names]
    for i, device in enumerate(devices):
        if (j := next(j for j, d in enumerate(devices) if d.name == device.name)) != i:
            raise UserError(f"--compare {','.join(names)} names {device.name} twice ({names[j]} and {names[i]}); drop "
                            "one")
    return devices


def _price(name: str, given: dict[str, float], options: PlanOptions) -> tuple[float | None, str | None]:
    if name in given:
        return given[name], "given"
    if options.price_per_device_hour is not None:
        return options.price_per_device_hour, "given"
    catalog = catalog_price(name)
    if catalog is None:
        return None, None
    return catalog.usd_per_device_hour, "catalog: " + catalog.describe()


def _nowhere(contexts: list[PlanContext]) -> str:
    """The basis when no count meets what min_devices asks on any device, in the flags' words: "no device count fits"
    was said of hardware that fits where only --max-decode-latency-s or --target-tokens-per-s was out of reach."""
    limit = min(ctx.options.max_devices for ctx in contexts)
    return f"no device count up to --max-devices {limit} {_constraints(contexts[0])} on any compared hardware (see warnings)"


def _it(n: int, fits: bool) -> str:
    return ("it fits" if n == 1 else "they fit") if fits else ("it does" if n == 1 else "they do")


def _same_count(contexts: list[PlanContext], mins: list[int | None],
                fits: Callable[[int, int], bool]) -> tuple[list[int | None], str]:
    """The smallest count at which every device fits: the largest of their own smallest counts, or — where some
    layout rule (heads, batch) leaves a device nothing at that count — the next count on the ladder where all fit."""
    found = [n for n in mins if n is not None]
    if not found:  # nothing fits anywhere: each shows its largest count with a layout, and says so
        return [None] * len(contexts), _nowhere(contexts)
    start = max(found)
    limit = min(ctx.options.max_devices for ctx in contexts)
    ladder = sorted({n for ctx in contexts for n in _counts(ctx.device, limit) if n >= start})
    missing = [ctx.device.name for ctx, m in zip(contexts, mins, strict=True) if m is None]
    # what each device's smallest count met: memory, and --max-decode-latency-s / --target-tokens-per-s when given
    # (a device that fit but missed the latency bound was said to fit at no count)
    cond = _constraints(contexts[0])
    cond = cond if cond == "fits" else f"fits and {cond}"
    which = f"every compared hardware {cond}" if not missing else (
        f"every compared hardware but {', '.join(missing)} {cond} ({_it(len(missing), cond == 'fits')} "
        "at no count up to --max-devices: see warnings)")
    for n in ladder:
        if all(fits(i, n) for i, m in enumerate(mins) if m is not None):
            # a device that fits nowhere keeps its own fallback (the largest count with a layout, and a warning)
            return [n if m is not None else None for m in mins], (
                f"same device count: {n} each, the smallest at which {which} (--compare-basis budget for the same "
                "money, min-devices for each one's own smallest)")
    return list(mins), "each hardware at its own smallest device count (no common count fits all)"


def _same_budget(contexts: list[PlanContext], mins: list[int | None], budget: float | None,
                 fits: Callable[[int, int], bool]) -> tuple[list[int | None], str]:
    """Each device at the most devices ``budget`` dollars per hour buys (the largest count on its ladder with a
    fitting layout); default budget: the least at which every device fits at its own smallest count."""
    free = [ctx.device.name for ctx in contexts if ctx.options.price_per_device_hour is not None
            and not ctx.options.price_per_device_hour]
    if free:  # given as 0: the catalog was not asked, and a free device would buy any count
        raise UserError(f"--compare-basis budget cannot use a price of 0 for {', '.join(free)} (a free device buys "
                        "any count); give --price-per-device-hour "
                        f"{','.join(hardware_key(name) + '=X' for name in free)} above 0, or use --compare-basis devices")
    unpriced = [ctx.device.name for ctx in contexts if not ctx.options.price_per_device_hour]
    if unpriced:
        raise UserError(f"--compare-basis budget needs a price above 0 for {', '.join(unpriced)} (the price catalog "
                        f"has none); give --price-per-device-hour "
                        f"{','.join(hardware_key(name) + '=X' for name in unpriced)}")
    prices = [float(ctx.options.price_per_device_hour or 0.0) for ctx in contexts]
    if budget is None:
        costs = [n * p for n, p in zip(mins, prices, strict=True) if n is not None]
        if not costs:
            return [None] * len(contexts), _nowhere(contexts)
        budget, how = max(costs), "the least at which every compared hardware fits"
    else:
        how = "--budget-per-hour"
    counts: list[int | None] = []
    for i, (ctx, price) in enumerate(zip(contexts, prices, strict=True)):
        affordable = [n for n in _counts(ctx.device, ctx.options.max_devices) if n * price <= budget * (1 + 1e-9)]
        n = next((n for n in reversed(affordable) if fits(i, n)), None)
        if n is None:
            raise UserError(f"${budget:,.2f}/hour buys no count of {ctx.device.name} (${price:g}/device-hour) that "
                            "fits; raise --budget-per-hour")
        counts.append(n)
    return counts, f"same budget: ${budget:,.2f}/hour each ({how}), as many devices as it buys"
