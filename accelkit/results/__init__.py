"""The results store (SQLite) and its export."""

from accelkit.results.store import ResultStore, StoredResult, accelkit_home, default_path, export, flat_row

__all__ = ["ResultStore", "StoredResult", "accelkit_home", "default_path", "export", "flat_row"]
