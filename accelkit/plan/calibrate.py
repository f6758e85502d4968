"""Calibration: turn this machine's `accelkit hw probe` results (in the results store) into the
efficiencies the planner uses instead of its published priors, and describe the local CPU as a device.
A collective probe (`hw probe --collectives`) replaces the communication prior: its all-reduce bus
bandwidth is the link figure for the local CPU, and ÷ the scale-up link the efficiency on a catalog device.

A probe is used when planning for the local CPU (``--hardware cpu``) or when the probe's
``details['catalog_name']`` is the planned hardware; the plan says so in ``assumptions``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from accelkit.core import DeviceSpec, UnknownNameError, UserError
from accelkit.hardware import get_device
from accelkit.hardware.probe import CPU_DTYPES
from accelkit.hardware.probe_quality import small_copy, small_matmul, small_probe
from accelkit.plan.priors import (
    COMM,
    DEFAULT_ATTENTION_OF_COMPUTE,
    DEFAULT_COMM,
    Efficiency,
    assumed_compute,
    prior_efficiency,
)
from accelkit.results import ResultStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from accelkit.results import StoredResult

LOCAL_NAMES = ("cpu", "local", "local-cpu")


def _stored(read: Callable[[ResultStore], list[StoredResult]]) -> list[StoredResult]:
    """What ``read`` finds in the results store, or nothing where the store cannot be read."""
    try:
        with ResultStore(readonly=True) as store:  # reading: never waits on a writer's lock, creates nothing
            return read(store)
    except Exception:  # an unreadable store must not stop a plan; the plan then uses the priors
        return []


def _refuse_unreadable_store() -> None:
    """Raise UserError naming why the results store cannot be read (an ACCELKIT_HOME that is a file, an empty or
    damaged store file): `_stored` reads such a store as empty, and `--hardware cpu` then said "no probe of this
    CPU … run `accelkit hw probe` first", which fails the same way (found in a docs hunt)."""
    try:
        with ResultStore(readonly=True):
            return
    except Exception as exc:  # whatever keeps the store from opening is what the user must fix
        raise UserError(f"--hardware cpu plans from this CPU's `accelkit hw probe` results, but the results store "
                        f"cannot be read: {exc}") from None


def _probes(limit: int = 200) -> list[StoredResult]:
    return _stored(lambda store: store.query(kind="probe", limit=limit))


def latest_probe(device_name: str) -> Any | None:
    """Newest probe of the catalog device ``device_name`` at the default sizes or above (one below them, e.g. a
    copy that fits in L2, only when there is no other: its efficiencies would exceed what memory gives; the local
    CPU's are :func:`cpu_probes`)."""
    found = [s.result for s in _probes() if (s.result.details or {}).get("catalog_name") == device_name]
    return next((r for r in found if small_probe(r.details) is None), found[0] if found else None)


def cpu_probes() -> list[StoredResult]:
    """This CPU's stored probes, newest first: those stored under this machine's CPU name ('cpu: <model>', the name
    the bench looks its peaks up by), so a store carried over from another machine does not mix CPUs — the newest CPU
    probe's name, which an imported export's probe could be, planned this CPU with another's peaks (found in
    review)."""
    return _stored(ResultStore.cpu_probes)


def _cpu_peaks(probes: list[StoredResult]) -> dict[Any, tuple[float, StoredResult, str | None]]:
    """dtype → (FLOP/s, the probe it came from, why it is below the default size or None): the newest matmul of
    each dtype at the default size or above, else the largest smaller one (said so). A probe covers only the dtypes
    it was asked for (a bench's quick fp16 probe has fp16 alone), so no one probe has them all."""
    peaks: dict[Any, tuple[float, StoredResult, str | None]] = {}  # keys: the dtypes the stored JSON names
    for stored in probes:  # newest first: the first figure of a dtype is its newest
        for dtype, m in (stored.result.details.get("matmul") or {}).items():
            if not m.get("tflops"):
                continue
            small = small_matmul(stored.result.details, dtype)
            held = peaks.get(dtype)
            if held is None or (held[2] and (not small or (m.get("size") or 0) > (
                    held[1].result.details["matmul"][dtype].get("size") or 0))):
                peaks[dtype] = (float(m["tflops"]) * 1e12, stored, small)
    return peaks


def _cpu_bandwidth(probes: list[StoredResult]) -> tuple[StoredResult, str | None]:
    """The probe whose copy bandwidth describes this CPU's memory: the newest at the default copy size or above,
    else the largest smaller copy, with why it is suspect (a 1 MiB copy measured the cache at 159 GB/s)."""
    full = [s for s in probes if small_copy(s.result.details) is None]
    if full:
        return full[0], None
    best = max(probes, key=lambda s: s.result.details.get("bandwidth", {}).get("bytes_per_iteration") or 0)
    return best, small_copy(best.result.details)


def _small_note(why: str | None) -> str:
    return "" if why is None else f" ({why}; no probe at the default size is stored: run `accelkit hw probe`)"


def _probe_ref(stored: StoredResult) -> str:
    return f"result {stored.id}, {stored.result.created_at}"


def missing_cpu_peak(device: DeviceSpec, dtype: str) -> str:
    """Why the probed CPU ``device`` has no ``dtype`` peak, and the command that measures one."""
    have = ", ".join(device.peak_flops) or "none"
    if dtype not in CPU_DTYPES:
        return (f"{device.name}: `accelkit hw probe` measures no {dtype} matmul on a CPU (it measures "
                f"{', '.join(CPU_DTYPES)}; this CPU has: {have}); choose another --precision")
    return (f"{device.name}: no stored `accelkit hw probe` of this CPU measured a {dtype} matmul (measured: {have}); "
            f"run `accelkit hw probe --device cpu --dtype {dtype}`, then plan again")


def latest_collectives(device_name: str | None) -> Any | None:
    """Newest `hw probe --collectives` of the local CPU (``device_name`` None) or of catalog device
    ``device_name``; its ``details['bus_bandwidth_gbps']['all_reduce']`` is the measured bus bandwidth."""
    for result in (r.result for r in _stored(lambda store: store.query(kind="collectives", limit=50))):
        details = result.details or {}
        if not (details.get("bus_bandwidth_gbps") or {}).get("all_reduce"):
            continue
        if (device_name is None and details.get("device") == "cpu") or (
                device_name is not None and details.get("catalog_name") == device_name):
            return result
    return None


def _busbw_note(result: Any) -> tuple[float, str]:
    """(all-reduce bus bandwidth in bytes/s, the sentence a plan's assumptions carry)."""
    d = result.details
    gbps = float(d["bus_bandwidth_gbps"]["all_reduce"])
    return gbps * 1e9, (f"measured all-reduce bus bandwidth {gbps:.3f} GB/s ({d['backend']}, {d['world_size']} ranks, "
                        f"{d['largest_size_bytes'] / 2**20:g} MiB message; `accelkit hw probe --collectives`, "
                        f"{result.created_at})")


def local_cpu_device() -> tuple[DeviceSpec, Any]:
    """The host CPU as a DeviceSpec whose peaks are its measured matmul throughput and copy bandwidth: each dtype's
    newest matmul figure across this CPU's probes, the copy bandwidth of the newest probe — of those at the default
    sizes or above, else the largest smaller one, said so; ``source`` names the result id and date of each. Returns
    (device, newest probe)."""
    import psutil

    probes = cpu_probes()
    if not probes:
        _refuse_unreadable_store()
        raise UserError("no probe of this CPU in the results store; run `accelkit hw probe --device cpu` first, "
                        "then plan with --hardware cpu")
    newest = probes[0]
    measured = _cpu_peaks(probes)
    peaks = {dt: flops for dt, (flops, _, _) in measured.items()}
    copy, copy_small = _cpu_bandwidth(probes)
    source = "accelkit hw probe: " + "; ".join(
        [f"{dt} matmul from {_probe_ref(s)}{_small_note(small)}" for dt, (_, s, small) in measured.items()]
        + [f"copy bandwidth from {_probe_ref(copy)}{_small_note(copy_small)}"])
    fabric: dict[str, Any] = {"scaleup_domain": 1}
    coll = latest_collectives(None)
    if coll is not None:  # processes on this host talk over shared memory: the measured bus bandwidth is the link
        fabric = {"scaleup_fabric": f"{coll.details['backend']} (measured)", "scaleup_domain": max(
            int(coll.details["world_size"]), psutil.cpu_count() or 1),
            "scaleup_bandwidth_bytes_per_s": _busbw_note(coll)[0]}
    d = copy.result.details
    device = DeviceSpec(
        name=newest.result.hardware or "cpu", vendor="cpu", memory_bytes=int(psutil.virtual_memory().total),
        memory_type="DRAM", memory_bandwidth_bytes_per_s=d["bandwidth"]["gbps"] * 1e9, peak_flops=peaks,
        tdp_w=None, status="M", source=source, **fabric,
    )
    return device, newest.result


def resolve_hardware(name: str) -> DeviceSpec:
    """A catalog device, or the probed local CPU for 'cpu'/'local'."""
    if name.strip().lower() in LOCAL_NAMES:
        return local_cpu_device()[0]
    return get_device(name)


def hardware_key(device_name: str) -> str:
    """The shortest name that ``resolve_hardware`` takes back to this device (a ``--price-per-device-hour NAME=X``
    a hint can name): 'h100-pcie' for H100-PCIe-80GB (its alias 'h100' is the SXM5 card's), 'rtx-4090', 'tpu-v5e';
    'cpu' for the probed CPU, which is not in the catalog."""
    try:
        spec = get_device(device_name)
    except UnknownNameError:
        return LOCAL_NAMES[0]
    own = [n for n in (spec.name, *spec.aliases) if get_device(n).name == spec.name]  # the full name always is
    return min(own, key=len).lower()


def _kernel_notes(details: dict[str, Any], created_at: str) -> tuple[dict[str, float], list[str]]:
    """Efficiencies the kernel probes measured (elementwise bandwidth, attention), with their sentences."""
    found: dict[str, float] = {}
    notes = []
    ew = details.get("elementwise") or {}
    if ew.get("fraction_of_peak"):
        found["memory"] = min(1.0, float(ew["fraction_of_peak"]))
        ref = str(ew.get("reference") or "reference")  # "catalog HBM bandwidth", or "this probe's copy bandwidth"
        notes.append(f"memory efficiency {found['memory']:.2f} measured by `hw probe` elementwise add on this machine "
                     f"(of {ref if ref.startswith('this ') else 'the ' + ref}; {created_at})")
    attn = details.get("attention") or {}
    if attn.get("fraction_at_long_sequence"):
        measured = float(attn["fraction_at_long_sequence"])
        # past 1 the attention ran faster than the probe's own matmul — a matmul that read low (a small or quick
        # probe) —, and a plan on it showed an MFU of 384%: capped at 1, as the memory efficiency is
        found["attention"] = min(1.0, measured)
        shape = attn.get("shape", {})
        capped = f" — measured {measured:.2f}, past the probe's matmul peak: capped at 1" if measured > 1 else ""
        notes.append(f"attention efficiency {found['attention']:.2f} measured by `hw probe` causal attention fwd+bwd "
                     f"(seq {shape.get('seq')}, head dim {shape.get('head_dim')}, ÷ the causal block factor; "
                     f"{created_at}){capped}")
    return found, notes


def efficiency(device: DeviceSpec, dtype: str, *, use_calibration: bool = True) -> Efficiency:
    """Measured efficiencies when a matching probe exists (and ``use_calibration``), else the priors."""
    if device.vendor == "cpu":  # the device's peaks are already the measured, achieved figures
        return _cpu_efficiency(device)
    prior = prior_efficiency(device, dtype)
    coll = latest_collectives(device.name) if use_calibration else None
    link, link_words = _probed_link(device, coll) if coll is not None else (0.0, "")
    if coll is not None and link > 0:
        busbw, note = _busbw_note(coll)
        comm = busbw / link  # busbw is what a ring achieves per link
        kept = tuple(s for s in prior.sources if not s.startswith("communication"))
        prior = replace(prior, comm=comm, calibrated=True, sources=(
            *kept, f"communication efficiency {comm:.2f} = {note} ÷ {link_words}"))
    probe = latest_probe(device.name) if use_calibration else None
    if probe is None:
        return prior
    return _probed_efficiency(device, dtype, prior, probe)


def _probed_link(device: DeviceSpec, coll: Any) -> tuple[float, str]:
    """(the scale-up bandwidth the probe's ring had, in words): the planner takes ``comm`` × the link a group of k
    ranks per node has (``DeviceSpec.scaleup_group_bandwidth``), so the probe's busbw is divided by the same link at
    its own k. On a mesh (xGMI) that is per_peer · (k − 1), not the 8-device headline: a 2-rank MI300X probe
    (busbw 47.7 GB/s of a 64 GB/s peer link) ÷ the 448 GB/s headline gave efficiency 0.11, and an 8-MI300X plan
    then moved its all-reduces at 47.7 GB/s instead of the ~313 measured there. (0.0, "") when the probe had no two
    ranks on one node (nothing it measured crossed the scale-up fabric) or the device has no scale-up fabric."""
    if device.scaleup_bandwidth_bytes_per_s <= 0:
        return 0.0, ""
    d = coll.details
    nodes = int(d.get("num_nodes") or 1)
    ranks = int(d.get("nproc_per_node") or max(1, int(d.get("world_size") or 1) // max(1, nodes)))
    link = device.scaleup_group_bandwidth(ranks)
    if ranks < 2 or math.isinf(link):
        return 0.0, ""
    if link == device.scaleup_bandwidth_bytes_per_s:
        return link, f"scale-up link {link / 1e9:g} GB/s"
    per_peer = (device.per_peer_bandwidth_bytes_per_s or 0.0) / 1e9
    return link, (f"scale-up link of {ranks} ranks {link / 1e9:g} GB/s ({per_peer:g} GB/s per peer × {ranks - 1}, of "
                  f"the {device.scaleup_bandwidth_bytes_per_s / 1e9:g} GB/s mesh)")


def _cpu_efficiency(device: DeviceSpec) -> Efficiency:
    """A CPU's: compute 1.0 of its measured matmul, memory and the kernel classes from its probes, communication
    from the stored collectives when its fabric was measured."""
    coll = latest_collectives(None)
    comm = COMM.get(device.vendor, DEFAULT_COMM)
    comm_notes: tuple[str, ...] = ()
    if coll is not None and device.scaleup_fabric.endswith("(measured)"):
        comm, comm_notes = 1.0, (f"communication: {_busbw_note(coll)[1]} taken as the link bandwidth between "
                                 "ranks on this host, efficiency 1.0 of it (busbw already is the achieved figure)",)
    found: dict[str, float] = {}
    notes: list[str] = []
    # each kernel class from the newest probe that has it (an fp16-only probe has no attention figure: it is a
    # fraction of the same probe's fp32 matmul), of those at the default sizes first: a CPU's kernel figures are
    # fractions of the same probe's matmul and copy, which a small probe measures wrong
    for stored in sorted(cpu_probes(), key=lambda s: small_probe(s.result.details) is not None):
        small = _small_note(small_probe(stored.result.details))
        more, more_notes = _kernel_notes(stored.result.details, _probe_ref(stored) + small)
        for (key, value), note in zip(more.items(), more_notes, strict=True):
            if key not in found:
                found[key] = value
                notes.append(note)
    attention = found.get("attention", DEFAULT_ATTENTION_OF_COMPUTE)
    if "attention" not in found:
        notes.append(f"attention efficiency {attention:.2f} of the measured matmul: ASSUMED (the probe has no "
                     "attention figure; rerun `accelkit hw probe`)")
    return Efficiency(
        compute=1.0, memory=found.get("memory", 1.0), comm=comm, calibrated=True, attention=attention,
        flash2=attention, assumed=() if "attention" in found else ("attention",),
        sources=(f"calibrated: peaks are this CPU's measured matmul and copy bandwidth ({device.source}); "
                 "matmul efficiency 1.0 of those", *notes, *comm_notes),
    )


def _probed_efficiency(device: DeviceSpec, dtype: str, prior: Efficiency, probe: Any) -> Efficiency:
    """``prior`` with what this device's newest probe measured: the ``dtype`` matmul (or, still assumed, capped by
    what it measured in another dtype), the copy and the kernel classes."""
    d = probe.details
    changes, notes = _probed_compute(device, dtype, prior, probe)
    if d.get("bandwidth", {}).get("fraction_of_peak"):
        changes["memory"] = float(d["bandwidth"]["fraction_of_peak"])
        notes.append(f"memory efficiency {changes['memory']:.2f} measured by `hw probe` copy on this machine "
                     f"({probe.created_at})")
    found, kernel_notes = _kernel_notes(d, probe.created_at)
    if found:  # the elementwise figure is the memory-bound kernels' own class: it wins over the copy
        notes = [n for n in notes if not (n.startswith("memory") and "memory" in found)] + kernel_notes
        changes.update(found)
        if "attention" in found:
            changes["flash2"] = min(prior.flash2, found["attention"])
    if not notes:
        return prior
    if "compute" in changes and "attention" in prior.assumed and "attention" not in found:
        # the assumed attention figure is a fraction of the matmul's: it follows the measured (or capped) one
        changes["attention"] = changes["flash2"] = DEFAULT_ATTENTION_OF_COMPUTE * changes["compute"]
        notes.append(f"attention efficiency {changes['attention']:.2f} of dense peak: ASSUMED — half the matmul "
                     f"efficiency above (no published flash-attention figure for {device.name})")
    replaced = {n.split(' ')[0] for n in notes}  # 'compute' / 'memory' / 'attention'
    kept = tuple(s for s in prior.sources if s.split(' ')[0] not in replaced)
    if below := small_probe(d):  # the only probe of this device: used, and each figure says what is wrong with it
        notes = [n + _small_note(below) for n in notes]
    now_measured = {n.split(' ')[0] for n in notes if "ASSUMED" not in n}
    assumed = tuple(k for k in prior.assumed if k not in now_measured)
    return replace(prior, **changes, sources=(*notes, *kept), calibrated=True, assumed=assumed)


def _probed_compute(device: DeviceSpec, dtype: str, prior: Efficiency, probe: Any) -> tuple[dict[str, float], list[str]]:
    """The compute efficiency the probe's ``dtype`` matmul measured; without one, a still assumed figure is capped by
    what this card measured in another dtype. (changes, their notes)."""
    d = probe.details
    matmul = d.get("matmul", {}).get(dtype)
    changes: dict[str, float] = {}
    notes: list[str] = []
    if matmul and matmul.get("fraction_of_peak"):
        changes["compute"] = float(matmul["fraction_of_peak"])
        notes.append(f"compute efficiency {changes['compute']:.2f} measured by `hw probe` {dtype} matmul on this "
                     f"machine ({probe.created_at})")
    elif "compute" in prior.assumed:  # still assumed: never above what this card measured in another dtype
        measured = {dt: float(m["fraction_of_peak"]) for dt, m in d.get("matmul", {}).items()
                    if m.get("fraction_of_peak")}
        compute, note = assumed_compute(device.name, dtype, measured, f"`hw probe` on this machine, {probe.created_at}")
        if compute < prior.compute:
            changes["compute"] = compute
            notes.append(note)
    return changes, notes
