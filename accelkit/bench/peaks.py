"""The dense peaks MFU divides by: the catalog's datasheet figure on a known accelerator, and what this device's
matmul reached in `accelkit hw probe` for the same dtype (a CPU has only the second).

On a catalog GPU the bench reports MFU against both ("39% of the datasheet, 57% of what this GPU's matmul
reaches"); the probe runs once per device (``--quick``, stored) when the store has none at the default size and
``auto_probe`` allows (with --no-save, or when the store cannot take it, its peaks are used from memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.bench.metrics import Peak, catalog_peak, matmul_figure, stored_probe_peak
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
        """Probe every dtype the store has no peak for in one quick probe up front (before anything is timed). A
        stored probe below the default size is none: a `hw probe --size 256` stored before the bench was its MFU
        peak at 2143% where the quick probe at the default size gave 75.7% (found in review)."""
        if self.store is None or not self.auto_probe:
            return

        support = supported_dtypes(self.device)
        measured = {d: self._measured(d) for d in dict.fromkeys(dtypes) if support.get(d, "no") is None}
        missing = [d for d, (peak, small) in measured.items() if peak.flops is None or small]
        if missing:
            small = any(measured[d][1] for d in missing)
            self.reporter.note(f"no {'/'.join(missing)} matmul peak for {self.hardware} in the store"
                               f"{self._small_only if small else ''}: running `accelkit hw probe --quick --dtype "
                               f"{','.join(missing)}` for MFU")
            self._keep(probe(ProbeConfig(device=self.device, dtypes=tuple(missing), quick=True,
                                          min_time_s=self.probe_min_time_s)))

    def _keep(self, result: Measurement) -> None:
        """Store a probe run here; one the store does not take (--no-save, a store error) is used from memory."""
        if self.writer.add(result) is None:
            self._unstored.append(result)

    #: what a note on a probe about to run adds when the store's only figures are below the default size
    _small_only = " at the default size (a smaller probe's figure is held under the peak by call overhead)"

    def _measured(self, dtype: str) -> tuple[Peak, bool]:
        """The best stored probe's peak for ``dtype`` (``probe_peak``), else one run here and not stored — and
        whether it is a stored probe below the default size, no peak (``accelkit.hardware.probe_quality``): taken,
        saying so, only when no other is to be had."""
        assert self.store is not None
        peak, best = stored_probe_peak(self.store, self.hardware, dtype)
        small = best is not None and best.quality == "small"
        if peak.flops is not None and not small:
            return peak, False
        for result in reversed(self._unstored):
            m = result.details.get("matmul", {}).get(dtype)
            if m:
                flops, figure = matmul_figure(m, dtype)
                return Peak(flops, f"measured: a quick `accelkit hw probe` run by this bench (not stored), "
                                   f"{figure}"), False
        return peak, small

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
        peak, small = self._measured(dtype)
        unsupported = supported_dtypes(self.device).get(dtype, "not probed") is not None
        if peak.flops is not None and (not small or not self.auto_probe or unsupported):
            return peak  # a small probe only where none is to run here (--no-probe): its source says MFU reads high
        if unsupported:
            return Peak(None, f"MFU unavailable: `hw probe` measures no {dtype} matmul peak on this device")
        if not self.auto_probe:
            return Peak(None, f"MFU unavailable: {peak.source}; {self._how(dtype)}")
        self.reporter.note(f"no {dtype} peak for {self.hardware} in the store{self._small_only if small else ''}: "
                           f"running `hw probe --quick --dtype {dtype}`")
        self._keep(probe(ProbeConfig(device=self.device, dtypes=(dtype,), quick=True, min_time_s=self.probe_min_time_s)))
        return self._measured(dtype)[0]
