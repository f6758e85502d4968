"""The dense peaks MFU divides by: the catalog's datasheet figure on a known accelerator, and what this device's
matmul reached in `accelkit hw probe` for the same dtype (a CPU has only the second).

On a catalog GPU the bench reports MFU against both ("39% of the datasheet, 57% of what this GPU's matmul
reaches"); the probe runs once per device (``--quick``, stored) when the store has none and ``auto_probe`` allows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.bench.metrics import Peak, catalog_peak, probe_peak

if TYPE_CHECKING:
    from accelkit.bench.runner import Reporter
    from accelkit.results import ResultStore


class Peaks:
    """Peaks per dtype for one device, resolved once each."""

    def __init__(self, device: str, hardware: str, catalog: str | None, store: ResultStore | None, auto_probe: bool,
                 reporter: Reporter):
        self.device, self.hardware, self.catalog = device, hardware, catalog
        self.store, self.auto_probe, self.reporter = store, auto_probe, reporter
        self._probe: dict[str, Peak] = {}

    def _how(self, dtype: str) -> str:
        return f"run `accelkit hw probe --device {self.device} --dtype {dtype}` to measure it"

    def prefetch(self, dtypes: list[str]) -> None:
        """Probe every dtype the store has no peak for in one quick probe up front (before anything is timed)."""
        if self.store is None or not self.auto_probe:
            return
        from accelkit.hardware.probe import ProbeConfig, probe, supported_dtypes

        support = supported_dtypes(self.device)
        missing = [d for d in dict.fromkeys(dtypes)
                   if support.get(d, "no") is None and probe_peak(self.store, self.hardware, d)[0].flops is None]
        if missing:
            self.reporter.note(f"no {'/'.join(missing)} matmul peak for {self.hardware} in the store: running "
                               f"`accelkit hw probe --quick --dtype {','.join(missing)}` for MFU")
            self.store.add(probe(ProbeConfig(device=self.device, dtypes=tuple(missing), quick=True)))

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
        peak, _ = probe_peak(self.store, self.hardware, dtype)
        if peak.flops is not None:
            return peak
        from accelkit.hardware.probe import ProbeConfig, probe, supported_dtypes

        if supported_dtypes(self.device).get(dtype, "not probed") is not None:
            return Peak(None, f"MFU unavailable: `hw probe` measures no {dtype} matmul peak on this device")
        if not self.auto_probe:
            return Peak(None, f"MFU unavailable: {peak.source}; {self._how(dtype)}")
        self.reporter.note(f"no {dtype} peak for {self.hardware} in the store: running `hw probe --quick --dtype {dtype}`")
        self.store.add(probe(ProbeConfig(device=self.device, dtypes=(dtype,), quick=True)))
        return probe_peak(self.store, self.hardware, dtype)[0]
