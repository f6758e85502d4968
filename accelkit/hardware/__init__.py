"""Hardware: the accelerator catalog, detection of the local machine, and probes (measured roofline).

Importing this package does not import torch; ``detect`` and ``probe`` import it when called.
"""

from accelkit.hardware.catalog import get_device, list_devices, match_device_name

__all__ = ["get_device", "list_devices", "match_device_name"]
