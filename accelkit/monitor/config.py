"""The exporter's settings, apart from the exporter (which imports prometheus_client), so that the CLI can
build `accelkit monitor`'s flags from them without importing anything heavy."""

from __future__ import annotations

from dataclasses import dataclass

from accelkit.core.spec import Spec, spec_field


@dataclass(frozen=True, slots=True, kw_only=True)
class ExporterConfig(Spec):
    """Where and how often."""

    host: str = spec_field("127.0.0.1", doc="Address to bind; 0.0.0.0 exposes it beyond this machine.")
    port: int = spec_field(9400, min=0, max=65535, doc="Port (9400 is the DCGM exporter's; 0 picks a free one).")
    interval: float = spec_field(1.0, min=0.05, max=86400.0, doc="Seconds between hardware samples.")

    def validate(self) -> None:
        if not self.host.strip():  # was taken, then start() said "cannot listen on :9400 (Name or service not known)"
            raise ValueError(f"host={self.host!r} (--host) names no address; give 127.0.0.1 (this machine only) or 0.0.0.0 "
                             "(every interface)")
