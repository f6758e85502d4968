"""Which ranks failed, and why — read back after torchrun exits non-zero (pure Python, no torch).

torchrun's own summary ("Root Cause (first observed failure)") orders the failures by a timestamp in whole
seconds, and when one rank raises, its peers fail within the same second with "Connection reset by peer": the
summary, and the last lines of the output, often name a victim. So each rank's entry point is wrapped with
torch's ``@record`` (``worker.py``), which writes the exception to the rank's ``TORCHELASTIC_ERROR_FILE`` under
torchrun's ``--log-dir``; accelkit's error handler adds the global rank, the host and a nanosecond timestamp.
Ranks that died without a Python exception (a signal, ``os._exit``) have no error file: they come from torchrun's
summary (rank, exit code, signal, time in seconds).

Order, first failure first: by the second it happened; within one second a rank that died without an exception
comes before one that raised (a killed rank's peers raise because they lost it), except a rank ended by SIGTERM,
which comes last — that is how torchrun stops the ranks still running once one has failed (a hung rank whose peer
timed out waiting for it ends so); then by nanoseconds.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

#: the longest exception message quoted per rank (gloo's and NCCL's run to several hundred characters)
MAX_MESSAGE_CHARS = 400
_LOST_PEER = re.compile(r"Connection (reset|closed) by peer|Broken pipe", re.IGNORECASE)
_TIMEOUT = re.compile(r"timed out|timeout", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RankFailure:
    """One failed rank: ``what`` is ``Type: message`` for an exception, else how the process ended."""

    rank: int
    local_rank: int | None
    host: str | None
    what: str
    time_s: int
    time_ns: int | None = None  # only from an error file written by accelkit's handler
    is_exception: bool = True

    @property
    def is_timeout(self) -> bool:
        """Whether the rank gave up waiting for a peer: gloo's "Timed out waiting …ms", NCCL's watchdog "collective
        operation timeout", the process group's store barrier or a store wait timing out."""
        return self.is_exception and _TIMEOUT.search(self.what) is not None

    @property
    def is_stopped(self) -> bool:
        """Ended by SIGTERM: torchrun stopping the group after another rank failed (rarely a cause itself)."""
        return not self.is_exception and self.what.startswith("killed by SIGTERM")

    @property
    def lost_a_peer(self) -> bool:
        """Whether the rank's exception is its connection to a peer going away ("Connection reset by peer", "closed
        by peer", a broken pipe): what a peer's death does to the others, never a cause itself."""
        return self.is_exception and _LOST_PEER.search(self.what) is not None

    @property
    def order(self) -> tuple[int, int, int, int]:
        # a rank that lost its peer, or that torchrun stopped, comes after the others whatever the clock says: the
        # peer that died by a signal is seen by torchrun's next poll, which on a loaded machine came a second after
        # the survivor had raised "Connection reset by peer" and written its error file
        return (int(self.lost_a_peer or self.is_stopped), self.time_s, 2 if self.is_stopped else int(self.is_exception),
                self.time_ns or 0)

    def describe(self) -> str:
        where = ", ".join(p for p in (f"host {self.host}" if self.host else "",
                                      f"local rank {self.local_rank}" if self.local_rank is not None else "") if p)
        return f"rank {self.rank}{f' ({where})' if where else ''}: {self.what}"


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS - 1] + "…"


def from_error_files(log_dir: Path) -> list[RankFailure]:
    """The failures recorded in the ranks' error files (``error.json``) anywhere under ``log_dir``."""
    failures = []
    for path in sorted(log_dir.rglob("error.json")):
        try:
            message = json.loads(path.read_text())["message"]
            info = message.get("extraInfo", {})
            rank = int(info["rank"]) if "rank" in info else int(path.parent.name)  # torch's own file: local rank
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # a rank killed while writing it: torchrun's summary still names the rank
        time_ns = int(info["time_ns"]) if "time_ns" in info else None
        failures.append(RankFailure(
            rank=rank, local_rank=int(info["local_rank"]) if "local_rank" in info else None, host=info.get("host"),
            what=_shorten(str(message.get("message", "unknown error"))),
            time_s=time_ns // 1_000_000_000 if time_ns is not None else int(info.get("timestamp", 0)), time_ns=time_ns))
    return failures


_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file)\s*:\s*(.*?)\s*$")
_RANK = re.compile(r"(\d+)(?: \(local_rank: (\d+)\))?")
_EXIT = re.compile(r"(-?\d+)(?: \(pid: \d+\))?\s*(?:\((SIG\w+)\))?")


def _signal_name(exit_code: int) -> str | None:
    """The signal a negative exit code stands for (-9 → SIGKILL): torch 2.11's torchrun prints the code without
    the name that later versions add."""
    import signal

    try:
        return signal.Signals(-exit_code).name if exit_code < 0 else None
    except ValueError:
        return None


_LOOPBACK = ("localhost", "127.0.0.1", "::1")


def from_torchrun_summary(lines: Iterable[str]) -> list[RankFailure]:
    """The failures torchrun's ChildFailedError summary lists (``[i]:`` blocks of ``time``, ``host``, ``rank``,
    ``exitcode``, ``error_file``)."""
    failures: dict[int, RankFailure] = {}
    block: dict[str, str] = {}

    def close() -> None:
        if "rank" in block and (m := _RANK.match(block["rank"])):
            rank, local = int(m.group(1)), int(m.group(2)) if m.group(2) is not None else None
            code = _EXIT.match(block.get("exitcode", ""))
            if code and (name := code.group(2) or _signal_name(int(code.group(1)))):
                what = f"killed by {name} (exit code {code.group(1)}), no Python exception"
            else:
                what = f"exited with code {code.group(1) if code else '?'} without a Python exception"
            try:
                when = int(time.mktime(time.strptime(block.get("time", ""), "%Y-%m-%d_%H:%M:%S")))
            except ValueError:
                when = 0
            host = block.get("host")
            if host in _LOOPBACK:  # (torchrun on this node lists only this node's ranks, by its loopback name: a rank
                host = socket.gethostname()  # that raised names the machine — "localhost" read as another host)
            failures.setdefault(rank, RankFailure(rank=rank, local_rank=local, host=host, what=what,
                                                  time_s=when, is_exception=False))
        block.clear()

    for line in lines:
        if re.match(r"^\s*\[\d+\]:\s*$", line) or line.startswith(("=====", "-----")):
            close()
        elif m := _FIELD.match(line):
            block.setdefault(m.group(1), m.group(2))
    close()
    return list(failures.values())


def failed_ranks(log_dir: Path, output: Iterable[str]) -> list[RankFailure]:
    """Every failed rank, first failure first: the error files' exceptions, and the summary's ranks that left none."""
    recorded = {f.rank: f for f in from_error_files(log_dir)}
    for f in from_torchrun_summary(output):
        recorded.setdefault(f.rank, f)
    return sorted(recorded.values(), key=lambda f: f.order)


#: torch's own log lines (glog style: ``E1201 16:12:32.973000 21369 torch/…] …``) and torchrun's banners
_TORCH_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d|^\*{5}")
#: the lines rank 0 writes for the launcher (``RankContext.say``: ``[rank 0/N] …``)
RANK_NOTE = re.compile(r"^\[rank \d+/\d+\] ")


def notes_only(show: Callable[[str], None]) -> Callable[[str], None]:
    """An ``on_line`` for :func:`accelkit.distributed.launch.launch` that passes rank 0's notes to ``show`` and
    drops the rest of the ranks' and torchrun's output — torch's log lines, a failing rank's traceback — which the
    failure's one-line error sums up."""
    return lambda line: show(line) if RANK_NOTE.match(line) else None


#: faulthandler's stack dump under "Fatal Python error: …" (which torchrun's ranks have on)
_STACK_DUMP = re.compile(r"^\s*(Current thread 0x|Thread 0x|File \"|Extension modules:|<no Python frame>|\(total: )")
#: ranks' lines quoted for a failure without a Python exception
NATIVE_LINES = 4


_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:")
#: the lines that open a Python traceback, which a native crash never prints: a peer that failed during the process
#: group's start prints its traceback without torch's ``[rankN]:`` marks (the hook that adds them is not set yet)
_TRACEBACK_START = re.compile(r"^(Traceback \(most recent call last\):|During handling of the above exception|"
                              r"The above exception was the direct cause)")
#: a traceback's source lines (four spaces in), the carets under them, and the rest of a ``File "…", line N, in f``
#: line that a crash's line was written into (see _CRASH_TEXT)
_TRACEBACK_BODY = re.compile(r"^( {4}|\s*[\^~]+\s*$|.*\", line \d+, in \S+\s*$)")
#: the exception line that ends a traceback: ``RuntimeError: …``, ``torch.distributed.DistBackendError: …``
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: |$)")
#: what native crashes print. Python writes a traceback line in pieces (the file name, the line number, … each a
#: write of its own), so another process's line, written whole, can land inside one: ``  File "terminate called
#: without an active exception`` — the crash's text is then the rest of that line
_CRASH_TEXT = re.compile(r"terminate called |Fatal Python error: |Segmentation fault|Bus error|Illegal instruction")


def _crash_text_apart(lines: Iterable[str]) -> Iterable[str]:
    """Each line, with a crash's text that landed inside another process's line split off as a line of its own."""
    for line in lines:
        m = _CRASH_TEXT.search(line)
        if m and line[:m.start()].strip() and not _RANK_PREFIX.match(line):
            yield line[:m.start()]
            yield line[m.start():]
        else:
            yield line


def last_rank_lines(output: list[str], rank: int, n: int = NATIVE_LINES) -> list[str]:
    """The last ``n`` lines the ranks printed themselves before torchrun reported the failure — where a native crash
    says what it was ("terminate called …", "Fatal Python error: Aborted", "Segmentation fault"): torch's log lines,
    torchrun's banners and report, faulthandler's stack dumps, accelkit's progress lines and the lines torch marks
    as another rank's (``[rankN]:``, its tracebacks: a peer's "Connection reset by peer") left out, and so are
    Python tracebacks without marks (a peer that failed while the process group started: its "Connection closed by
    peer" came after the crash's line and took the last lines' place, or took the crash's text into one of its
    lines)."""
    end = next((i for i, line in enumerate(output) if "failed (exitcode" in line), len(output))
    kept, in_traceback = [], False
    for line in _crash_text_apart(output[:end]):
        if not line.strip() or _TORCH_LOG.match(line) or RANK_NOTE.match(line) or _STACK_DUMP.match(line):
            continue
        if (m := _RANK_PREFIX.match(line)) and int(m.group(1)) != rank:
            continue
        if _TRACEBACK_START.match(line):
            in_traceback = True
            continue
        if in_traceback:  # a peer's unmarked traceback; a crash's own line written in between is kept
            if _TRACEBACK_BODY.match(line):
                continue
            if _EXCEPTION_LINE.match(line):
                in_traceback = False
                continue
        kept.append(line.strip())
    return [_shorten(line) for line in kept[-n:]]


def failure_message(failures: list[RankFailure], output: list[str] | None = None) -> str:
    """One line: the first failed rank and its error, then the others; when the first died without a Python
    exception (a signal: a native crash or abort), the last lines it may have printed (``output``)."""
    first, *rest = failures
    text = f"first failure — {first.describe()}"
    if rest:
        text += f"; then {len(rest)} more — " + "; ".join(f.describe() for f in rest)
    if not first.is_exception and output and (lines := last_rank_lines(output, first.rank)):
        text += f"; the last output lines (rank {first.rank}'s, or unmarked): " + " | ".join(lines)
    return text
