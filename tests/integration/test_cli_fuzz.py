"""The CLI fuzz test (issue #15, acceptance 2): every command and option of the real typer app — discovered from
the app object, so a command added later is covered without touching this file — gets generated bad values:
wrong types, negatives, zero, 10²⁰, NaN, missing / directory / non-UTF-8 / /dev/full paths, malformed JSON, a
config of absurd sizes.

A case passes when it ends within CASE_TIMEOUT_S of CPU time (and CASE_WALL_LIMIT_S of wall time; a case told to
run long is stopped after LONG_CASE_WALL_S and passes if it had not failed by then) with
  * exit 2 and exactly one ``error:`` line on stderr that names the value, the option, or the base's own
    deliberate mistake (the value was valid, so the command went on to the next check), or
  * exit 0 or 1 with no traceback and no "internal error" (a bug caught by main()'s last resort),
and, under --json with exit 0, stdout is one JSON document.

Cases run in-process through ``accelkit.cli.app.main(argv)`` (SystemExit caught, stdout/stderr captured, an
alarm per case) so that a thousand fit in about a minute; a few run as real subprocesses for the entry point
and for argv bytes that are not UTF-8. Each command gets a BASE of arguments that makes a run cheap (or fail
late and fast, after every flag was checked), and the fuzzed option is appended after it (the last value of
an option wins). Failures in commands of other areas are marked KNOWN with their issue item; they are reported
but do not fail this test.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

import pytest
import typer
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from accelkit.cli.app import INTERNAL_ERROR, app, main
from accelkit.core.terminal import printable
from accelkit.core.units import parse_size
from tests.conftest import REPO, empty_stdin

# A case's limit is CPU time (ITIMER_PROF: this process, all its threads), which other tenants of a loaded CI machine
# do not eat into — a case that spins (the hang this catches) burns it all the same; wall time only guards against a
# case that blocks without using the CPU. A loaded 2-core run measured 9.5 s of wall time for a case 3 s long alone.
CASE_TIMEOUT_S = 10.0
CASE_WALL_LIMIT_S = 60.0
# A case told to take long (`--warmup-time 400`, a 4 GiB `--copy-size`) passes by running on: by this much wall time
# it has shown that it took the value and started the work without an error, and letting it spin on to its CPU limit
# only burned seconds of the run's CPU (a few such cases a run, drawn at random)
LONG_CASE_WALL_S = 3.0
LONG_COPY_BYTES = 256 << 20  # `hw probe --copy-size` at or beyond this may run past a case's time, rightly
PROBE_LOOPS = 4  # `hw probe --min-time S` of the base (one dtype) measures S in each of 4 loops (matmul, copy, …)
MIN_CASES = 1000
RANDOM_CASES = 400  # hypothesis draws, on top of the systematic pass over every option (~1,380 cases)

#: every bench run of a case: the CPU, nothing stored, no probe, no warm-up, one measured iteration, no progress lines
#: (on by default off a terminal since #29 item 8: they would stand beside the one error line)
BENCH_RUN = ("--device", "cpu", "--no-save", "--no-probe", "--warmup", "0", "--warmup-time", "0",
             "--min-iterations", "1", "--min-time", "0", "--max-iterations", "1", "--no-progress")
# command path → (arguments that make a run cheap or make it fail late, text of that deliberate failure or None)
# {t} is the fixture folder. A command not listed here runs with only the fuzzed option.
BASE: dict[tuple[str, ...], tuple[tuple[str, ...], str | None]] = {
    ("hw", "show"): (("h100",), None),
    ("hw", "probe"): (("--quick", "--device", "cpu", "--dtype", "fp32", "--size", "64", "--copy-size", "1MiB",
                       "--min-time", "0", "--no-save"), None),
    ("models", "show"): (("llama-3.1-8b",), None),
    ("results", "show"): (("1",), "no result with id 1"),
    ("plan",): (("--model", "llama-3.1-8b", "--hardware", "h100"), None),
    # bench: the root and `suite` fail late on purpose (fp8 on a CPU is refused once every flag was read: a suite
    # run takes a minute); each workload runs for real on a tiny size with one measured iteration
    ("bench",): (("--suite", "quick", "--precision", "fp8", *BENCH_RUN), "nothing to run"),
    ("bench", "suite"): (("quick", "--precision", "fp8", *BENCH_RUN), "nothing to run"),
    ("bench", "bert"): (("--size", "tiny", "--batch-size", "1", "--seq-len", "8", *BENCH_RUN), None),
    ("bench", "resnet"): (("--size", "tiny", "--batch-size", "2", "--image-size", "32", *BENCH_RUN), None),
    ("bench", "llm"): (("--model", "tiny-llama", "--prompt-len", "4", "--output-len", "2", *BENCH_RUN), None),
    ("bench", "llm-train"): (("--model", "tiny-llama", "--seq-len", "8", *BENCH_RUN), None),
    # (its fp8 refusal is a line of its own before the error: it fails late on the device instead)
    ("bench", "diffusion"): (("--size", "tiny", *BENCH_RUN, "--device", "cuda"), "torch sees no cuda"),
    ("bench", "dataloader"): (("--num-workers", "0", "--batch-size", "2", "--image-size", "8", *BENCH_RUN), None),
    ("bench", "custom"): (("--module", "accelkit_fuzz_model:factory", *BENCH_RUN), None),
    ("report",): (("--out", "{t}/report.html"), None),
    ("tune",): (("--module", "accelkit_fuzz_missing:factory", "--no-save"), "cannot import 'accelkit_fuzz_missing'"),
    ("profile",): (("--module", "accelkit_fuzz_missing:factory", "--no-save"), "cannot import 'accelkit_fuzz_missing'"),
    ("sweep",): (("{t}/sweep-without-workloads.yaml",), "workloads"),
    ("serve",): (("--model", "{t}/no-model"), "has no config.json"),
    ("loadtest",): (("--base-url", "http://127.0.0.1:9", "--model", "m", "--num-prompts", "1", "--warmup", "0",
                     "--no-save"), "no request to http://127.0.0.1:9"),
    # (--once waits min(--interval, 1 s) for its CPU reading: 1 s of every monitor case at the default)
    ("monitor",): (("--once", "--interval", "0.05"), None),
}

# (command path, option) → the issue item that owns the failure (another area's command, fixed there)
KNOWN: dict[tuple[tuple[str, ...], str | None], str] = {}

INT_POOL = ("-1", "0", "-99999999999999999999", "100000000000000000000", "9223372036854775808", "18446744073709551616",
            "1e20", "1.5", "nan", "inf", "-inf", "abc", "", " ", "0x10", "9" * 400, "½", "1_000",
            "9" * 5000, "-" + "9" * 5000)  # (past Python's 4,300-digit int-string limit)
# escape sequences a terminal acts on (window title, clear screen, C1 CSI, cursor moves): an error naming the value
# prints it escaped (#30 item 5)
ESCAPE_POOL = ("\x1b]0;pwned\x07", "x\x1b[2J\x1b[H", "\x9b31mred", "a\x08\x7fb", "\x1b[1A\x1b[Kgone")
FLOAT_POOL = ("-1", "0", "-0.0", "1e20", "1e400", "-1e400", "nan", "NaN", "inf", "-inf", "abc", "", "1,5", "0x1p3",
              "9" * 400)
# Every path is inside the fixture folder (the cases run with it as the working directory, so a relative
# value lands there too) or /dev/full: a command that writes where it was told must not write anywhere else.
TEXT_POOL = ("", " ", "-", "--", "abc", "ünïcödé ✓", "💥", "x" * 5000, "a,b,,c", "1,2,x", "key=value=x",
             "ttft_ms=-1", "http://", "json:loads", "random", "sharegpt:", "jsonl:{t}/latin1.bin",
             "\udcff\udcfe.json", *ESCAPE_POOL)  # \udcff…: how Python decodes argv bytes that are not UTF-8
PATH_POOL = ("{t}/missing/accelkit-fuzz", "{t}/dir", "{t}/latin1.bin", "/dev/full", "{t}/malformed.json",
             "{t}/list.json", "{t}/absurd", "{t}/absurd/config.json", "{t}/empty", "{t}/dir/missing/x.json",
             "{t}/nan-config", "{t}", "{t}/deep.json", "{t}/deep")


def _snapshot(t: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry under ``t``: relative path → (mode, a file's bytes); what a case may have changed."""
    entries: dict[str, tuple[int, bytes | None]] = {}
    for folder, dirs, files in os.walk(t):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            entries[os.path.relpath(path, t)] = (st.st_mode, Path(path).read_bytes() if S_ISREG(st.st_mode) else None)
    return entries


def _fixture_files(t: Path) -> None:
    """The files the pools name, (re)made before every case."""
    import shutil

    for entry in t.iterdir() if t.exists() else ():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    t.mkdir(exist_ok=True)
    (t / "dir").mkdir()
    (t / "latin1.bin").write_bytes(b"caf\xe9 \xff\xfe not utf-8\n")
    (t / "malformed.json").write_text('{"model_type": "llama", "hidden_size": ')
    (t / "list.json").write_text("[1, 2, 3]")
    (t / "empty").write_bytes(b"")
    (t / "absurd").mkdir()
    (t / "absurd" / "config.json").write_text(json.dumps({  # sizes no machine holds: refused, never allocated
        "model_type": "llama", "vocab_size": 10**12, "hidden_size": 2**20, "intermediate_size": 2**22,
        "num_hidden_layers": 10**6, "num_attention_heads": 2**14, "num_key_value_heads": 2**14,
        "max_position_embeddings": 10**12}))
    (t / "nan-config").mkdir()
    (t / "nan-config" / "config.json").write_text('{"model_type": "llama", "hidden_size": NaN, "vocab_size": -1}')
    (t / "deep.json").write_text("[" * 100_000 + "]" * 100_000)  # past what json.loads takes
    (t / "deep").mkdir()  # a config nested 900 deep (json.loads takes it; walking it recursively does not)
    (t / "deep" / "config.json").write_text('{"model_type": "llama", "rope_scaling": ' + "[" * 900 + "]" * 900 + "}")
    (t / "no-model").mkdir()
    (t / "sweep-without-workloads.yaml").write_text("name: fuzz\nkind: plan\nhardware: h100\n")
    (t / "accelkit_fuzz_model.py").write_text(  # `bench custom --module accelkit_fuzz_model:factory`
        "import torch\n\ndef factory():\n    return torch.nn.Linear(4, 2), torch.randn(2, 4)\n")


CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what a terminal acts on, newline and tab aside


# ---- the app's commands and options ------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    path: tuple[str, ...]
    opt: str | None  # None: a positional argument
    name: str
    kind: str  # int, float, bool-flag, choice, path, text
    names: tuple[str, ...]  # every spelling an error may use to name it
    required: bool = False


def _kind(p) -> str:
    """What a parameter takes: typer >= 0.26 keeps the annotation (type_descriptor), older typer a click type."""
    import typing

    if getattr(p, "is_flag", False):
        return "bool-flag"
    tp = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    if tp is not None:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) is not typing.Literal and len(args) == 1:
            tp = args[0]
        tname = "choice" if typing.get_origin(tp) is typing.Literal else getattr(tp, "__name__", str(tp)).lower()
    else:
        tname = type(p.type).__name__.lower()
    for kind in ("int", "float", "choice"):
        if kind in tname:
            return kind
    if "path" in tname or "file" in tname or any(w in p.name for w in ("path", "out", "dir", "model", "dataset")):
        return "path"
    return "text"


def _spec_kinds(cmd) -> dict[str, str]:
    """Flags generated from a Spec field through a parse function (``--warmup-time``, ``--kv-cache-memory``): click
    sees text, the field is a number — such a flag gets the number pool (from the field's type) as well."""
    import typing

    fn = cmd.callback
    while fn is not None and not hasattr(fn, "spec_options"):
        fn = getattr(fn, "__wrapped__", None)
    kinds = {}
    for spec, options in getattr(fn, "spec_options", ()):
        hints = typing.get_type_hints(spec)
        for o in options:
            if o.parse is None:
                continue
            tp = hints[o.field]
            args = [a for a in typing.get_args(tp) if a not in (type(None), Ellipsis)]
            tp = args[0] if len(args) == 1 else tp  # int | None → int, tuple[int, ...] → int (a one-item list)
            if tp in (int, float):
                kinds[o.flag.split("/")[0]] = tp.__name__
    return kinds


def discover() -> list[Param]:
    root = typer.main.get_command(app)
    found: list[Param] = []

    def walk(cmd, path):
        spec_kinds = _spec_kinds(cmd)
        for p in cmd.params:
            if p.name == "help":
                continue
            opts = tuple(getattr(p, "opts", ())) + tuple(getattr(p, "secondary_opts", ()))
            is_option = type(p).__name__.endswith("Option")
            names = {*opts, p.name, p.name.replace("_", "-"), *(o.lstrip("-").replace("-", "_") for o in opts)}
            if getattr(p, "metavar", None):
                names.add(str(p.metavar))
            kind = spec_kinds.get(p.opts[0], _kind(p)) if is_option else _kind(p)
            found.append(Param(path, p.opts[0] if is_option else None, p.name, kind,
                               tuple(n for n in names if n), bool(getattr(p, "required", False))))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, (*path, name))

    walk(root, ())
    return found


# ---- running one case ----------------------------------------------------------------------------------------
class _CaseTimeout(BaseException):  # not Exception: main()'s last resort must not swallow it
    pass


_timed_out = [False]  # this case's limit fired already


def _alarm(signum, frame):
    # Both limits can fire within a millisecond of each other: the second must not raise again while the first
    # unwinds — it would land in a `with` block's exit and leave what that exit cleans up (a progress heartbeat
    # thread) running into the next cases.
    if not _timed_out[0]:
        _timed_out[0] = True
        raise _CaseTimeout


@dataclass
class Outcome:
    argv: list[str]
    param: Param | None
    value: str | None
    code: object = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    problem: str | None = None
    known: str | None = None


def _argv(param: Param, value: str | None, t: Path) -> list[str]:
    base, _ = BASE.get(param.path, ((), None))
    base = [a.format(t=t) for a in base]
    if param.opt is None:  # a positional: it replaces the base's positional (if any)
        options = [a for a in base if a.startswith("-")]
        kept = [a for i, a in enumerate(base) if a.startswith("-") or (i > 0 and base[i - 1] in options
                                                                       and base[i - 1].startswith("--"))]
        return [*param.path, *([value] if value is not None else []), *kept]
    if param.kind == "bool-flag":
        return [*param.path, *base, f"{param.opt}={value}"]
    return [*param.path, *base, param.opt, value if value is not None else ""]


class _stdin(contextlib._RedirectStream):  # contextlib has redirect_stdout/stderr, not stdin
    _stream = "stdin"


def run_in_process(argv: list[str], wall_limit_s: float = CASE_WALL_LIMIT_S) -> tuple[object, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    _timed_out[0] = False
    old = signal.signal(signal.SIGALRM, _alarm), signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_PROF, CASE_TIMEOUT_S)
    signal.setitimer(signal.ITIMER_REAL, wall_limit_s)
    t0 = time.perf_counter()
    code: object
    try:
        # stdin: empty, as a subprocess's from /dev/null (`results import -` reads it; pytest's raises OSError)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _stdin(empty_stdin()):
            try:
                main(argv)
                code = 0
            except SystemExit as exc:
                code = 0 if exc.code is None else exc.code
    except _CaseTimeout:
        code = "timeout"
    except BaseException as exc:  # anything main() let through is the finding
        code = f"raised {type(exc).__name__}"
        err.write("".join(traceback.format_exception(exc)))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGALRM, old[0])
        signal.signal(signal.SIGPROF, old[1])
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def judge(o: Outcome) -> str | None:
    """None when the case behaved; else what went wrong."""
    if o.code == "timeout":
        if _asked_for_long(o.param, o.value):
            return None  # `--warmup-time 400` was told to warm up for 400 s: running on is right
        return f"did not end within {CASE_TIMEOUT_S:g} s of CPU time ({CASE_WALL_LIMIT_S:g} s of wall time)"
    if isinstance(o.code, str):
        return f"{o.code} escaped main()"
    if "Traceback" in o.stderr:
        return "traceback on stderr"
    raw = CONTROL.search(o.stdout + o.stderr)
    if raw:
        return f"a raw control character {raw.group()!r} reached the terminal (print it escaped)"
    if INTERNAL_ERROR in o.stderr:
        return "internal error (an unexpected exception)"
    if o.code == 2:
        lines = [line for line in o.stderr.splitlines() if line.strip()]
        if len(lines) != 1 or not lines[0].startswith("error:"):
            return f"exit 2 with {len(lines)} stderr lines, not one 'error:' line"
        return _names_it(o, lines[0])
    if o.code in (0, 1):
        if o.code == 0 and "--json" in o.argv and o.stdout.strip():
            try:
                json.loads(o.stdout)
            except ValueError:
                return "--json stdout is not one JSON document"
        return None
    return f"exit {o.code!r}"


def _asked_for_long(param: Param | None, value: str | None) -> bool:
    """A duration option given a valid, finite value longer than a case may take — or a probe's copy size
    that takes that long to copy on a busy 2-core machine (the random cases draw any size up to 64 GiB)."""
    if param is not None and param.opt == "--copy-size":
        try:
            return parse_size(value or "", field="--copy-size") >= LONG_COPY_BYTES
        except (ValueError, OverflowError):  # not a size, or one past a float ("9" × 400: the CLI refuses both)
            return False
    if param is None or not any(w in param.name for w in ("time", "duration", "interval")):
        return False
    try:
        seconds = float(value or "")
    except ValueError:
        return False
    if param.path == ("hw", "probe") and param.opt == "--min-time":
        seconds *= PROBE_LOOPS
    return math.isfinite(seconds) and seconds >= CASE_TIMEOUT_S / 2


def _names_it(o: Outcome, line: str) -> str | None:
    low = line.lower()
    if o.param is None:
        return None
    for name in o.param.names:
        if name.lower() in low:
            return None
    value = (o.value or "").strip()
    if not value:
        return None  # an empty value cannot be quoted back; any one-line error will do
    forms = {value, o.value or ""}
    if "_" in value and value.replace("_", "").lstrip("+-").isdigit():
        forms.add(str(int(value)))  # ("1_000" is Python's — and click's — 1000: said as the number it was read as)
    for form in forms:  # quoted back as typed ('\xa0' kept) or stripped
        shown = printable(form)  # how a value with control characters is printed (#30 item 5)
        if form.lower()[:40] in low or repr(form)[1:40].lower() in low or shown.lower()[:40] in low:
            return None
    if any(repr(item.strip()).lower() in low for item in value.split(",") if item.strip()):
        return None  # a comma list: the item that is wrong
    _, sentinel = BASE.get(o.param.path, ((), None))
    if sentinel and sentinel.lower() in low:
        return None  # the value was fine: the base's own deliberate mistake was reported
    if any(w in low for w in ("missing", "no such option", "got unexpected extra", "requires an argument")):
        return None
    return "the error names neither the value nor the option"


# ---- value strategies ----------------------------------------------------------------------------------------
def _outside(value: str) -> bool:
    """A value that, as a path, could point outside the fixture folder."""
    return value.lstrip().startswith(("/", "~")) or ".." in value


def _values(kind: str):
    text = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=24).filter(
        lambda v: not _outside(v))
    pools = {"int": INT_POOL, "float": FLOAT_POOL, "path": PATH_POOL + TEXT_POOL[:6],
             "text": TEXT_POOL + PATH_POOL[:4], "choice": TEXT_POOL, "bool-flag": ("x", "1", "", "yes")}
    strategies = [st.sampled_from(pools[kind])]
    if kind == "int":
        strategies += [st.integers(max_value=-1).map(str), st.integers(min_value=10**9).map(str)]
    if kind == "float":
        strategies += [st.floats().map(repr), st.floats(max_value=-1e-9).map(repr)]
    if kind in ("text", "choice", "path"):
        strategies.append(text)
    return st.one_of(*strategies)


# ---- the test ------------------------------------------------------------------------------------------------
@dataclass
class Tally:
    folder: Path
    outcomes: list[Outcome] = field(default_factory=list)
    gave_up: dict[tuple[tuple[str, ...], str | None], str] = field(default_factory=dict)
    made: dict[str, tuple[int, bytes | None]] | None = None  # the folder as _fixture_files left it

    def run(self, param: Param, value: str | None, t: Path) -> None:
        key = (param.path, param.opt)
        if key in self.gave_up:  # an option that already hung: one 10 s case is enough to report it
            return
        o = self.run_argv(_argv(param, value, t), param, value)
        if o.code == "timeout" and o.problem:  # (a case told to run long that ran on did not hang)
            self.gave_up[key] = o.problem

    def run_argv(self, argv: list[str], param: Param | None = None, value: str | None = None) -> Outcome:
        # a case may have written over them (--out …) or beside them: made again then (most cases only read them;
        # remaking the whole folder each time cost more than a refused case)
        if self.made is None or _snapshot(self.folder) != self.made:
            _fixture_files(self.folder)
            self.made = _snapshot(self.folder)
        # a case told to take long (it may sleep, using no CPU) is stopped by the wall clock, once it has started
        wall_limit_s = LONG_CASE_WALL_S if _asked_for_long(param, value) else CASE_WALL_LIMIT_S
        code, out, err, seconds = run_in_process(argv, wall_limit_s)
        o = Outcome(argv, param, value, code, out, err, seconds)
        o.problem = judge(o)
        if o.problem is None and any(t.name == "accelkit-progress" for t in threading.enumerate()):
            o.problem = "a progress heartbeat thread outlived the command"  # its lines would land in what runs next
        o.known = KNOWN.get((param.path, param.opt)) if o.problem and param else None
        self.outcomes.append(o)
        return o


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    t = tmp_path_factory.mktemp("fuzz")
    _fixture_files(t)
    return t


@pytest.fixture
def one_thread():
    """torch on one thread while the cases run: the bench cases' tiny models take ~1 ms a step on one thread, and
    ~20-50x that with two threads on a loaded 2-core machine (the threads spin against each other and the other
    tenants). Behaviour is the same; the thread count is put back after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_cli_fuzz(fuzz_dir, capsys, record_property, monkeypatch, one_thread):
    import torch  # noqa: F401 — import the heavy libraries once, outside any case's time
    import torchao.quantization  # noqa: F401

    monkeypatch.chdir(fuzz_dir)  # relative paths a case writes land in the fixture folder (wiped before each case)
    monkeypatch.syspath_prepend(str(fuzz_dir))  # the tiny `bench custom --module` factory lives there
    params = discover()
    covered_commands = {p.path for p in params}
    assert {("hw", "probe"), ("results", "export"), ("loadtest",), ("tune",)} <= covered_commands
    tally = Tally(fuzz_dir)
    t0 = time.perf_counter()

    # 1. every command that has required arguments with none of them, then every option systematically
    for path in sorted({p.path for p in params if p.required}):
        tally.run_argv(list(path))
    for param in params:
        for value in {"int": ("abc", "-1", "100000000000000000000", "nan"),
                      "float": ("abc", "-1", "nan", "1e400"),
                      "bool-flag": ("x",),
                      "choice": ("abc", ""),
                      "path": ("{t}/dir", "{t}/latin1.bin", "/dev/full", "{t}/malformed.json", "{t}/absurd",
                               "{t}/deep.json"),
                      "text": ("", "x" * 5000, "{t}/latin1.bin", ESCAPE_POOL[0])}[param.kind]:
            tally.run(param, value.format(t=fuzz_dir), fuzz_dir)

    # 2. hypothesis: random options, random bad values
    @settings(max_examples=RANDOM_CASES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(params).flatmap(lambda p: st.tuples(st.just(p), _values(p.kind))))
    def random_case(case):
        param, value = case
        tally.run(param, value.replace("{t}", str(fuzz_dir)), fuzz_dir)

    random_case()
    in_process_s = time.perf_counter() - t0

    # 3. the real entry point in a subprocess, with argv bytes that are not UTF-8
    num_in_process = len(tally.outcomes)
    for argv in ([b"models", b"show", b"caf\xe9-\xff"], [b"results", b"list", b"--hardware", b"\xff\xfe"],
                 [b"results", b"export", b"--out", os.fsencode(fuzz_dir) + b"/\xff/x.json"],
                 [b"hw", b"show", b"h\xff100"], [b"plan", b"--model", b"\xfe", b"--json"],
                 [b"sweep", os.fsencode(fuzz_dir) + b"/latin1.bin"], [b"monitor", b"--once", b"--port", b"-1"]):
        proc = subprocess.run([sys.executable, "-m", "accelkit", *argv], capture_output=True, timeout=120,
                              cwd=fuzz_dir, env={**os.environ, "PYTHONPATH": str(REPO)})
        o = Outcome([os.fsdecode(a) for a in argv], None, None, proc.returncode,
                    proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))
        o.problem = judge(o)
        o.known = KNOWN.get((tuple(o.argv[:1]), None)) if o.problem else None
        tally.outcomes.append(o)

    n = len(tally.outcomes)
    bad = [o for o in tally.outcomes if o.problem and not o.known]
    known = [o for o in tally.outcomes if o.problem and o.known]
    slowest = max(tally.outcomes, key=lambda o: o.seconds)
    by_command: dict[str, float] = {}
    for o in tally.outcomes[:num_in_process]:
        command = " ".join(o.param.path if o.param else o.argv[:1])
        by_command[command] = by_command.get(command, 0.0) + o.seconds
    costly = ", ".join(f"{c or 'accelkit'} {t:.0f} s" for c, t in sorted(by_command.items(), key=lambda x: -x[1])[:4])
    record_property("cli_fuzz_cases", n)
    with capsys.disabled():
        print(f"\ncli fuzz: {n} cases ({len(params)} options of {len(covered_commands)} commands): {num_in_process} "
              f"in-process in {in_process_s:.0f} s, {n - num_in_process} in subprocesses; "
              f"{len(bad)} failures, {len(known)} known ({', '.join(sorted({o.known for o in known})) or '-'}); "
              f"slowest {slowest.seconds:.1f} s: accelkit {' '.join(slowest.argv)[:120]}; most time: {costly}")
    assert n >= MIN_CASES
    assert not bad, "\n".join(
        f"accelkit {' '.join(repr(a) if (' ' in a or not a) else a for a in o.argv)[:300]}\n"
        f"    → {o.problem} (exit {o.code!r}, {o.seconds:.1f} s): {o.stderr.strip()[-400:]!r}"
        for o in bad[:40]) + (f"\n… and {len(bad) - 40} more" if len(bad) > 40 else "")


# ---- hostile import files (#30 acceptance 2) ------------------------------------------------------------------
IMPORT_CASES = 80
MARK = '"__hostile__"'  # replaced in the file's text by what json.dumps cannot write
WRONG = {  # field → values of the export format's fields that no export holds (wrong types, out of range)
    "name": (5, [], {}, None, True), "kind": (5, [], None), "hardware": (5, [], {}),
    "num_devices": ("2", 2.5, True, [], None, 0, -1, 2**21, 2**80), "throughput": ("fast", [], -1.0, True, {}),
    "mfu": ("x", -0.5, {}), "memory_bytes": ([], "x", {"peak": "x"}, {"peak": -1}, {"peak": 2**64}, {"peak": 1.5}),
    "details": ([], "x", 5), "environment": ([], "x"), "run_id": (5, [], {}), "id": ("1", -1, 0, 2**63, 1.5, True),
    "created_at": (5, "not a date", "", "99999-01-01T00:00:00Z", "1999-12-31T00:00:00Z", "3000-01-01T00:00:00Z",
                   "2026-13-01T00:00:00Z"),
    "latency_s": ("x", [], {"median": "x"}), "non_finite": ("x", [1], {"/throughput": "big"}, {"/name": "inf"}),
    "type": ("Measurement", "guess", "", None, 1),
}
MEASUREMENT_ONLY = {"samples": ([], "x", {"s": "x"}, {"s": [1, "x"]}, {"s": {}})}
TEXT_LEVEL = {  # (field, text put in place of the marker)
    "huge integer": lambda f: "9" * 5000, "deep nesting": lambda f: "[" * 100_000 + "]" * 100_000,
    "deep details": lambda f: '{"a": ' + "[" * 70 + "]" * 70 + "}", "lone surrogate": lambda f: '"x\\ud800"',
}


def _hostile_file(exported: list[dict]):
    """A hypothesis strategy over export files: a real export (a plan and a measurement) with one record made
    wrong — a field of the wrong type or out of range, the wrong type for its body, a measurement without samples, or
    text json.dumps cannot write (a 5,000-digit integer, nesting past the parser, details 70 deep, a lone
    surrogate). Returns (file text, what was done)."""
    def field_value(i: int):
        fields = {**WRONG, **(MEASUREMENT_ONLY if exported[i]["type"] == "measurement" else {})}
        return st.sampled_from(sorted(fields)).flatmap(lambda f: st.tuples(st.just(f), st.sampled_from(fields[f])))

    def wrong_field(i: int):
        def build(fv):
            records = [dict(r) for r in exported]
            records[i][fv[0]] = fv[1]
            return json.dumps(records), f"record {i}: {fv[0]}={fv[1]!r}"[:120]
        return field_value(i).map(build)

    def text_level(i: int):
        def build(case):
            kind, field_name = case
            records = [dict(r) for r in exported]
            records[i]["details" if kind == "deep details" else field_name] = "__hostile__"
            return json.dumps(records).replace(MARK, TEXT_LEVEL[kind](field_name), 1), f"record {i}: {kind} in {field_name}"
        numeric = ("num_devices", "throughput", "id", "mfu")
        return st.tuples(st.sampled_from(sorted(TEXT_LEVEL)), st.sampled_from((*numeric, "name", "hardware")))\
            .filter(lambda c: c[0] != "huge integer" or c[1] in numeric).map(build)

    def missing_samples(i: int):
        records = [dict(r) for r in exported]
        if records[i]["type"] == "measurement":
            del records[i]["samples"]
        else:  # a plan's body under type measurement
            records[i]["type"] = "measurement"
        return st.just((json.dumps(records), f"record {i}: measurement without samples / plan as measurement"))

    index = st.integers(0, len(exported) - 1)
    return index.flatmap(lambda i: st.one_of(wrong_field(i), text_level(i), missing_samples(i)))


@pytest.fixture(scope="module")
def exported_records(tmp_path_factory) -> list[dict]:
    """What `accelkit results export` writes for a plan and a bench measurement (an inf among its samples)."""
    from accelkit.core import Estimate, Measurement
    from accelkit.results import ResultStore, export

    with ResultStore(tmp_path_factory.mktemp("export") / "results.db") as store:
        store.add(Estimate(kind="plan", name="llama on h100", hardware="H100", num_devices=8, throughput=12.5,
                           mfu=0.4, memory_bytes={"total": 1 << 30}, details={"assumptions": ["x"], "ratio": math.inf}))
        store.add(Measurement(kind="bench", name="fp32", hardware="cpu", throughput=3.0,
                              samples={"latency_s": [0.1, math.inf]}, environment={"hostname": "box"}), run_id="r1")
        return json.loads(export(store.query(newest_first=False), "json"))


def test_results_import_refuses_every_hostile_file_in_one_line(exported_records, tmp_path, capsys):
    """Every generated file ends in exit 2 with one `error:` line naming the record, never a traceback, an
    "internal error" or a stored row; the unmutated export imports (so a refusal is the mutation's doing)."""
    from accelkit.results import ResultStore

    good = tmp_path / "good.json"
    good.write_text(json.dumps(exported_records))
    code, _, err, _ = run_in_process(["results", "import", str(good)])
    assert code == 0, err
    assert ResultStore(readonly=True).count() == 2
    # `-` reads standard input: each case gets an empty one (as a subprocess's from /dev/null), never pytest's
    code, out, err, _ = run_in_process(["results", "import", "-"])
    assert code == 2 and out == "" and err.startswith("error: standard input is empty;") and err.count("\n") == 1, err
    (tmp_path / "accelkit-home" / "results.db").unlink()
    bad: list[str] = []

    @settings(max_examples=IMPORT_CASES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(_hostile_file(exported_records))
    def case(file_and_what):
        text, what = file_and_what
        path = tmp_path / "hostile.json"
        path.write_text(text, errors="surrogatepass")
        code, _, err, _ = run_in_process(["results", "import", str(path)])
        lines = [line for line in err.splitlines() if line.strip()]
        stored = (tmp_path / "accelkit-home" / "results.db").exists() and ResultStore(readonly=True).count()
        if code != 2 or len(lines) != 1 or not lines[0].startswith("error:") or INTERNAL_ERROR in err or stored:
            bad.append(f"{what} → exit {code!r}, stored {stored}: {err.strip()[-300:]!r}")
            if stored:
                (tmp_path / "accelkit-home" / "results.db").unlink()  # the next case starts empty again

    case()
    assert not bad, "\n".join(bad[:20])
