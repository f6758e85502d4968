"""Energy and cost from device-seconds. Energy is an ESTIMATE (TDP × activity factor × time), never a
measurement; docs/methodology.md asks that it be labelled so."""

from __future__ import annotations

from accelkit.core import DeviceSpec


def energy_j(device: DeviceSpec, *, num_devices: int, seconds: float, activity_factor: float) -> float | None:
    """Joules that ``num_devices`` draw for ``seconds`` at ``activity_factor`` × TDP; None without a TDP."""
    if device.tdp_w is None:
        return None
    return num_devices * device.tdp_w * activity_factor * seconds


def cost(num_devices: int, seconds: float, price_per_device_hour: float | None) -> float | None:
    """Money for ``num_devices`` held ``seconds`` at ``price_per_device_hour``; None without a price."""
    if price_per_device_hour is None:
        return None
    return num_devices * price_per_device_hour * seconds / 3600.0
