"""Per-device-hour prices: ``data/prices.csv`` (offer, source, publication date and status per row), keyed by the
catalog names of ``data/hardware.csv``. Kept apart from the hardware facts: prices move monthly and vary by
provider; `accelkit plan --price-per-device-hour NAME=X` overrides them."""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True, slots=True, kw_only=True)
class DevicePrice:
    """One device-hour of one catalog device, and where the figure comes from."""

    name: str  # catalog name, as hardware.csv spells it
    usd_per_device_hour: float
    offer: str  # who sells it, on which terms (on demand)
    source: str  # where the figure was read
    date: str  # the source's publication date, YYYY-MM-DD
    status: str  # V2: two sources agree; S: one secondary source

    def describe(self) -> str:
        """Where the figure comes from, in words: the offer, the source and its date."""
        return f"{self.offer} ({self.source}, {self.date})"


@functools.cache
def _prices() -> dict[str, DevicePrice]:
    text = resources.files("accelkit.hardware").joinpath("data/prices.csv").read_text()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    rows = csv.DictReader(io.StringIO("\n".join(lines)))
    return {r["name"]: DevicePrice(name=r["name"], usd_per_device_hour=float(r["usd_per_device_hour"]),
                                   offer=r["offer"], source=r["source"], date=r["date"], status=r["status"])
            for r in rows}


def catalog_price(name: str) -> DevicePrice | None:
    """The catalog price of the device whose catalog name is ``name``, or None when the catalog has none."""
    return _prices().get(name)


def list_prices() -> tuple[DevicePrice, ...]:
    """Every catalog price, in file order."""
    return tuple(_prices().values())
