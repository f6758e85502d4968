"""Measurement of a workload across variants: the runner (``runner``: refuse → predict → reference → measure →
record), its workloads (``workloads/``: a registry of plug-ins), the precision matrix (``variants``), the MFU
peaks (``peaks``), the planner's figure per variant (``predict``), the fp32 reference at no extra memory
(``reference``), the phases (``session``: measuring), the typed results and the store (``record``: recording),
counters (``trackers``), derived metrics (``metrics``) and the named suites (``suite``). The result type lives in
``accelkit.core.bench_result``; the timing loop in ``accelkit.timing``.

Importing this package imports no torch; the runner and the workloads import it when they run.
"""
