"""accelkit's shared vocabulary — pure Python, no torch import.

``ModelSpec`` · ``DeviceSpec`` · ``Cluster`` · ``Recipe`` · ``Workload`` · ``Estimate`` · ``Measurement``
"""

from accelkit.core.device import DTYPES, Cluster, DeviceSpec
from accelkit.core.errors import AccelkitError, UnknownNameError, UserError
from accelkit.core.model import ModelSpec
from accelkit.core.recipe import Recipe
from accelkit.core.result import Estimate, Measurement
from accelkit.core.spec import Spec
from accelkit.core.stats import Stats, summarize
from accelkit.core.workload import Workload

__all__ = [
    "DTYPES", "AccelkitError", "Cluster", "DeviceSpec", "Estimate", "Measurement", "ModelSpec",
    "Recipe", "Spec", "Stats", "UnknownNameError", "UserError", "Workload", "summarize",
]
