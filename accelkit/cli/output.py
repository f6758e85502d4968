"""How commands talk: one JSON document on stdout with ``--json``, rich tables otherwise; progress and
warnings on stderr so that stdout stays parseable."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 150)
err = Console(stderr=True, soft_wrap=True)

JsonOption = typer.Option(False, "--json", help="Print one JSON document on stdout and nothing else there.")


def emit(data: Any, as_json: bool, render: Callable[[], None]) -> None:
    """Print ``data`` as JSON, or call ``render`` for the human view."""
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        sys.stdout.flush()
    else:
        render()


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Sequence[int] = ()) -> Table:
    """A rich table; ``right`` lists the column indexes to right-align (numbers)."""
    t = Table(title=title, title_justify="left", header_style="bold")
    for i, col in enumerate(columns):
        t.add_column(col, justify="right" if i in right else "left")
    for row in rows:
        t.add_row(*("-" if v is None else str(v) for v in row))
    return t


def csv_list(value: str | None, *, field: str, choices: Sequence[str] | None = None) -> list[str] | None:
    """'fp32,bf16' → ['fp32', 'bf16']; an item outside ``choices`` is a usage error naming it."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if choices is not None:
        for item in items:
            if item not in choices:
                from accelkit.core import UserError

                raise UserError(f"{field} {item!r} is not valid; choose from {', '.join(choices)}")
    return items


@contextmanager
def status(message: str, *, quiet: bool = False) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr while long work runs; yields a function that updates its text."""
    if quiet or not err.is_terminal:
        yield lambda text: None
        return
    with err.status(message) as st:
        yield lambda text: st.update(f"{message}: {text}")


@contextmanager
def flag_values() -> Iterator[None]:
    """Treat a ValueError raised while building specs from flags as the user's mistake (exit 2)."""
    from accelkit.core import UserError

    try:
        yield
    except UserError:
        raise
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def fmt_num(value: float | None, digits: int = 2) -> str | None:
    return None if value is None else f"{value:,.{digits}f}"
