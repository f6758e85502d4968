"""Reports: terminal tables (rich) and a self-contained HTML report with plots. No torch import."""

from accelkit.report.html import build_report, write_report

__all__ = ["build_report", "write_report"]
