"""The shipped dashboard's units are those of what its panels plot. DCGM's framebuffer figures are MiB; the memory
panel said "decmbytes" (Grafana's megabytes, 10^6 B), so an H100's 81,559 MiB showed as 81.6 GB — neither its
85.5 GB nor the 79.6 GiB that nvidia-smi's MiB make. Grafana's unit for MiB is "mbytes" (mebibytes)."""

import re

from accelkit.monitor.collectors import DCGM_METRICS
from accelkit.monitor.dashboard import dashboard

#: Grafana's unit ids for the units the DCGM help texts name
GRAFANA_UNIT = {"MiB": "mbytes", "W": "watt", "MHz": "rotmhz", "C": "celsius", "%": "percent"}


def test_each_dcgm_panel_uses_the_grafana_unit_of_its_metric():
    checked = 0
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            for name in re.findall(r"DCGM_FI_\w+", target["expr"]):
                unit = re.search(r"\(in (\S+)\)", DCGM_METRICS[name])
                if unit is None or "rate(" in target["expr"]:  # a bitmask; a rate is its own unit (mJ/s → W)
                    continue
                assert panel["fieldConfig"]["defaults"]["unit"] == GRAFANA_UNIT[unit.group(1)], (panel["title"], name)
                checked += 1
    assert checked >= 6  # used, used + free, reserved, power, temperature, clock
