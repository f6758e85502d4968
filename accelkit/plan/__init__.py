"""The planner: memory, FLOPs, time, energy and parallel layout for training and inference, and a
hardware recommendation — pure Python arithmetic from published formulas (no torch import, except the
CNN tracer that ``plan`` loads only for CNN models).

``plan(workload, cluster)`` predicts the layout written in the recipe; ``search(...)`` enumerates valid
layouts, drops what does not fit and ranks the rest; ``compare(...)`` does that per hardware.
"""

from accelkit.plan.api import plan, to_estimate, to_json
from accelkit.plan.calibrate import resolve_hardware
from accelkit.plan.context import PlanContext, make_context
from accelkit.plan.evaluate import Candidate, evaluate
from accelkit.plan.layout import Layout
from accelkit.plan.options import PlanOptions
from accelkit.plan.recommend import compare
from accelkit.plan.search import search, search_ctx

__all__ = [
    "Candidate", "Layout", "PlanContext", "PlanOptions", "compare", "evaluate", "make_context", "plan",
    "resolve_hardware", "search", "search_ctx", "to_estimate", "to_json",
]
