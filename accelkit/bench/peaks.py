"""The dense peaks MFU divides by: the catalog's datasheet figure on a known accelerator, and what this device's
matmul reached in `accelkit hw probe` for the same dtype (a CPU has only the second).

On a catalog GPU the bench reports MFU against both ("39% of the datasheet, 57% of what this GPU's matmul
reaches"); the probe runs once per device (``--quick``, stored) when the store has none and ``auto_probe`` allows
(with --no-save, or when the store cannot take it, its peaks are used from memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.bench.metrics import Peak, catalog_peak, matmul_figure, probe_peak
from accelkit.hardware.probe import ProbeConfig, probe, quick_probe_min_time, supported_dtypes

if TYPE_CHECKING:
    from accelkit.bench.record import StoreWriter
    from accelkit.bench.runner import Reporter
    from accelkit.core import Measurement
    from accelkit.results import ResultStore


class Peaks:
    """Peaks per dtype for one device, resolved once each."""

    def __init__(self, device: str, hardware: str, catalog: str | None, store: ResultStore | None, auto_probe: bool,
                 reporter: Reporter, writer: StoreWriter, run_min_time_s: float | None = None):
        """``store`` is read for stored probes (it may be read-only); a probe run here is written through
        ``writer`` (the run's: ``StoreWriter(None)`` with --no-save) and, when it is not stored, its peaks are
        still used from memory. ``run_min_time_s``: the run's own loops' ``min_time_s``: a probe run here measures
        no longer a loop (:func:`quick_probe_min_time`)."""
        self.device, self.hardware, self.catalog = device, hardware, catalog
        self.store, self.auto_probe, self.reporter = store, auto_probe, reporter
        self.writer = writer
        self.probe_min_time_s = None if run_min_time_s is None else quick_probe_min_time(run_min_time_s)
        self._probe: dict[str, Peak] = {}
        self._unstored: list[Measurement] = []  # probes run here that the store did not take

    def _how(self, dtype: str) -> str:
        return f"run `accelkit hw probe --device {self.device} --dtype {dtype}` to measure it"

    def prefetch(self, dtypes: list[str]) -> None:
        """Probe every dtype the store has no peak for in one quick probe up front (before anything is timed)."""
        if self.store is None or not self.auto_probe:
            return

        support = supported_dtypes(self.device)
        missing = [d for d in dict.fromkeys(dtypes) if support.get(d, "no") is None and self._measured(d).flops is None]
        if missing:
            self.reporter.note(f"no {'/'.join(missing)} matmul peak for {self.hardware} in the store: running "
                               f"`accelkit hw probe --quick --dtype {','.join(missing)}` for MFU")
            self._keep(probe(ProbeConfig(device=self.device, dtypes=tuple(missing), quick=True,
                                          min_time_s=self.probe_min_time_s)))

    def _keep(self, result: Measurement) -> None:
        """Store a probe run here; one the store does not take (--no-save, a store error) is used from memory."""
        if self.writer.add(result) is None:
            self._unstored.append(result)

    def _measured(self, dtype: str) -> Peak:
        """The newest stored probe's peak for ``dtype``, else one run here and not stored."""
        assert self.store is not None
        peak, _ = probe_peak(self.store, self.hardware, dtype)
        if peak.flops is not None:
            return peak
        for result in reversed(self._unstored):
            m = result.details.get("matmul", {}).get(dtype)
            if m:
                flops, figure = matmul_figure(m, dtype)
                return Peak(flops, f"measured: a quick `accelkit hw probe` run by this bench (not stored), {figure}")
        return peak

    def datasheet(self, dtype: str) -> Peak | None:
        """The catalog's dense peak (None off the catalog: a CPU, an unknown GPU)."""
        return catalog_peak(self.catalog, dtype) if self.catalog is not None else None

    def probe(self, dtype: str) -> Peak:
        """The newest stored `hw probe` matmul figure of this dtype (Peak(None, why) without one)."""
        if dtype not in self._probe:
            self._probe[dtype] = self._resolve_probe(dtype)
        return self._probe[dtype]

    def get(self, dtype: str) -> Peak:
        """The peak MFU's headline value divides by: the datasheet on a catalog device, else the probe."""
        return self.datasheet(dtype) or self.probe(dtype)

    def _resolve_probe(self, dtype: str) -> Peak:
        if self.store is None:
            return Peak(None, f"MFU unavailable: no results store to read a probe from; {self._how(dtype)}")
        peak = self._measured(dtype)
        if peak.flops is not None:
            return peak

        if supported_dtypes(self.device).get(dtype, "not probed") is not None:
            return Peak(None, f"MFU unavailable: `hw probe` measures no {dtype} matmul peak on this device")
        if not self.auto_probe:
            return Peak(None, f"MFU unavailable: {peak.source}; {self._how(dtype)}")
        self.reporter.note(f"no {dtype} peak for {self.hardware} in the store: running `hw probe --quick --dtype {dtype}`")
        self._keep(probe(ProbeConfig(device=self.device, dtypes=(dtype,), quick=True, min_time_s=self.probe_min_time_s)))
        return self._measured(dtype)
