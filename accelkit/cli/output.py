"""How commands talk: one JSON document on stdout with ``--json``, rich tables otherwise; progress and
warnings on stderr so that stdout stays parseable."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from accelkit.cli.spec_options import in_flag_words
from accelkit.core import UserError, strict_json
from accelkit.core.terminal import printable


class SafeConsole(Console):
    """rich's Console with every string it renders — a table cell, a title, a line, an error — passed through
    :func:`~accelkit.core.terminal.printable` first: names and messages come from stores, imports and servers, and
    an escape sequence in one must not reach the terminal. (rich itself removes only BEL, BS, VT, FF and CR.)"""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)

    def print_json(self, json: str | None = None, *, data: Any = None, **kwargs: Any) -> None:
        # JSON escapes C0 controls itself, but rich writes the C1 ones (U+0080-U+009F) raw
        import json as json_module

        data = json_module.loads(json) if json is not None else data
        super().print_json(data=_printable_strings(data), **kwargs)


def _printable_strings(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: _printable_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_printable_strings(v) for v in value]
    return value


out = SafeConsole(soft_wrap=True, width=None if sys.stdout.isatty() else 150)
err = SafeConsole(stderr=True, soft_wrap=True)

JsonOption = typer.Option(False, "--json", help="Print one JSON document on stdout and nothing else there.")
#: where stderr is not a terminal, a long command's first progress line comes within this many seconds …
FIRST_LINE_S = 0.5
#: … and then a line at least this often, even while one step runs on (a log shows the command is alive)
HEARTBEAT_S = 8.0
ProgressOption = typer.Option(
    None, "--progress/--no-progress",
    help="Progress on stderr (stdout keeps the output): a live line on a terminal, else a line per step and at "
         f"least one every {HEARTBEAT_S:g} s; --progress shows every step from the start, --no-progress silences it.")


def emit(data: Any, as_json: bool, render: Callable[[], None]) -> None:
    """Print ``data`` as JSON, or call ``render`` for the human view. The JSON is strict: an inf or NaN anywhere is
    written as null (a load test's inf rate as 'inf'), never as ``Infinity``/``NaN`` (``accelkit.core.strict_json``)."""
    if as_json:
        sys.stdout.write(strict_json.dumps(data, indent=2, default=str) + "\n")
        sys.stdout.flush()
    else:
        render()


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Sequence[int] = ()) -> Table:
    """A rich table; ``right`` lists the column indexes to right-align (numbers). A table whose columns are all
    unnamed (a vertical one: label, value) has no header row."""
    t = Table(title=title, title_justify="left", header_style="bold", show_header=any(columns))
    for i, col in enumerate(columns):
        t.add_column(col, justify="right" if i in right else "left")
    for row in rows:
        t.add_row(*("-" if v is None else str(v) for v in row))
    return t


def whole_words(t: Table, width: int | None = None) -> Table:
    """Never cut a cell with "…" (rich's default where a column is narrower than a word): each column at least as
    wide as its longest word when they all fit in ``width`` (the console's), and a word that still does not fit
    folds onto the next line rather than losing its end."""
    longest = [max((len(word) for cell in column.cells for word in str(cell).split()), default=0)
               for column in t.columns]
    fits = width is None or sum(longest) + 3 * len(longest) + 1 <= width  # cells, padding and borders
    for column, n in zip(t.columns, longest, strict=True):
        if fits:
            column.min_width = max(column.min_width or 0, n + 2)  # rich counts the padding in it
        column.overflow = "fold"
    return t


def csv_list(value: str | None, *, field: str, choices: Sequence[str] | None = None) -> list[str] | None:
    """'fp32,bf16' → ['fp32', 'bf16']; an item outside ``choices`` is a usage error naming it, and so is an empty
    item between commas (`--sweep-rates 1,,2` ran rates 1 and 2, silently dropping whatever was meant between them).
    A value with no items at all ('' or ' ') is [] for the caller to refuse in its own words."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    if any(items):
        empty = [i for i, item in enumerate(items, start=1) if not item]
        if empty:
            raise UserError(f"{field} {value!r} has an empty item (item {empty[0]} of {len(items)}); give the values "
                            "separated by single commas, e.g. " + ",".join(item for item in items if item))
    items = [item for item in items if item]
    if choices is not None:
        for item in items:
            if item not in choices:
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


class Heartbeat:
    """Calls ``beat()`` from a daemon thread whenever nothing was printed for ``every_s`` seconds (the first time
    after ``first_s``); the owner calls :meth:`printed` after each line of its own and :meth:`close` at the end."""

    def __init__(self, beat: Callable[[], None], *, every_s: float = HEARTBEAT_S, first_s: float | None = None):
        self.beat, self.every_s = beat, every_s
        self.lock = threading.RLock()  # the owner's lines and the beats never interleave
        self._due = time.perf_counter() + (every_s if first_s is None else first_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="accelkit-progress", daemon=True)
        self._thread.start()

    def printed(self) -> None:
        self._due = time.perf_counter() + self.every_s

    def _run(self) -> None:
        while not self._stop.wait(min(0.25, self.every_s)):
            if time.perf_counter() >= self._due:
                with self.lock:
                    if self._stop.is_set():
                        return
                    self.beat()
                    self.printed()

    def close(self) -> None:
        with self.lock:
            self._stop.set()
        self._thread.join(timeout=5)


class Progress:
    """A long step's progress, on stderr only (stdout stays the command's output or JSON document).

    On a terminal: a live line — spinner, what is happening, elapsed time.
    Where stderr is a file or pipe: plain lines (``[ 12.3 s] text``) — the first within ``FIRST_LINE_S`` (a command
    done sooner prints none; ``--progress`` prints every step from the start), then one per step, at most one every
    ``min_interval_s`` unless the step changes, and at least one every ``HEARTBEAT_S`` while a step runs on.
    ``show=False`` (--no-progress): nothing.
    """

    def __init__(self, title: str, *, show: bool | None = None, min_interval_s: float = 2.0):
        self.title = title
        #: set when the work was stopped (Ctrl-C, SIGTERM) and returned what it finished: the last line then says
        #: "stopped", not "done", before the command says what it kept
        self.stopped = False
        self.live = err.is_terminal and show is not False
        self.lines = show is not False and not self.live
        self.min_interval_s = min_interval_s
        self._t0 = time.perf_counter()
        self._last_line = -float("inf")
        self._last_step: str | None = None
        self._text = "…"
        self._started = show is True  # default: silent until the command has run FIRST_LINE_S
        self._beat: Heartbeat | None = None
        self._bar: Any = None
        self._task: Any = None
        if self.live:
            from rich.progress import Progress as Live
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            self._bar = Live(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                             console=err, transient=True)
            self._task = self._bar.add_task(title, total=None)
            self._bar.start()
        elif self.lines:
            if self._started:
                self._line(f"{title} …")
            self._beat = Heartbeat(self._heartbeat, first_s=None if self._started else FIRST_LINE_S)

    def _heartbeat(self) -> None:
        still = " (still running)" if self._started else ""
        self._started = True
        self._line(f"{self.title}: {self._text}{still}")

    def _line(self, text: str) -> None:
        elapsed = time.perf_counter() - self._t0
        err.print(f"[{elapsed:6.1f} s] {text}", highlight=False, markup=False, soft_wrap=True)
        self._last_line = time.perf_counter()
        if self._beat is not None:
            self._beat.printed()

    def update(self, text: str, *, step: str | None = None) -> None:
        """``text``: what runs now; ``step``: a name that, when it changes, always gets its own line (e.g. the
        dtype being probed); other updates are thinned to one line every ``min_interval_s``."""
        if self.live:
            self._bar.update(self._task, description=f"{self.title}: {text}")
        elif self.lines:
            assert self._beat is not None
            with self._beat.lock:
                self._text = text
                new_step = step is not None and step != self._last_step
                if self._started and (new_step or time.perf_counter() - self._last_line >= self.min_interval_s):
                    self._line(f"{self.title}: {text}")
                if step is not None:
                    self._last_step = step

    def log(self, text: str) -> None:
        """A line that stays (a finished step, a note), shown whenever progress is shown."""
        if self.live:
            self._bar.console.print(text, highlight=False, markup=False, soft_wrap=True)
        elif self.lines:
            assert self._beat is not None
            with self._beat.lock:
                self._started = True
                self._line(text)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self._bar.stop()
        elif self.lines:
            assert self._beat is not None
            self._beat.close()
            if exc[0] is None and self._started:
                self._line(f"{self.title}: {'stopped' if self.stopped else 'done'}")


@contextmanager
def flag_values(flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """Treat a ValueError raised while building specs from flags as the user's mistake (exit 2). ``flags`` (field →
    flag, :func:`accelkit.cli.spec_options.field_flags`) puts the message in the words the user typed: a spec's
    ``timeout_s=inf is out of range`` reads ``--timeout inf is out of range``."""
    try:
        yield
    except UserError:
        raise
    except ValueError as exc:
        raise UserError(in_flag_words(str(exc), flags or {})) from exc


def fmt_num(value: float | None, digits: int = 2) -> str | None:
    """``value`` to ``digits`` decimals, or to 3 significant digits where those decimals would show fewer than two
    (a CPU's 0.28 tokens/s per device printed as 0, a tiny model's 0.35 ms prefill as 0.000 — `--json` had them)."""
    if value is None:
        return None
    if value != 0 and math.isfinite(value) and abs(value) < 10 ** (1 - digits):
        return f"{value:.3g}"
    return f"{value:,.{digits}f}"
