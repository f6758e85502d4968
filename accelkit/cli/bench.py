"""`accelkit bench WORKLOAD [options]` and `accelkit bench suite quick|reference`: a thin shell over
``accelkit.bench``. One subcommand per workload, its options generated from the workload's config Spec (and from
``Matrix``, ``BenchConfig`` and ``LoopConfig``), so `--help` shows only what applies. `accelkit bench --suite NAME`
still works as the older spelling of `accelkit bench suite NAME`.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, nullcontext, redirect_stdout
from typing import Any, NoReturn

import typer
from typer.core import TyperCommand

from accelkit.bench.runner import BenchConfig, Reporter, run_benchmark
from accelkit.bench.suite import SUITES
from accelkit.bench.variants import GRAD_COMPRESSIONS, Matrix
from accelkit.bench.workloads import (
    BenchWorkload,
    BertConfig,
    CustomConfig,
    DataLoaderConfig,
    DiffusionConfig,
    LLMConfig,
    LLMTrainConfig,
    ResNetConfig,
    make_workload,
)
from accelkit.bench.workloads.custom import check_target
from accelkit.cli.helptext import HelpGroup, examples
from accelkit.cli.output import JsonOption, csv_list, emit, err, flag_values, fmt_num, out, table, whole_words
from accelkit.cli.spec_options import field_flags, spec_options
from accelkit.cli.store import measuring, print_unsaved
from accelkit.core import AccelkitError, UnknownNameError, UserError
from accelkit.core.units import fmt_bytes
from accelkit.distributed.launch import DistConfig
from accelkit.distributed.quality import QualityConfig, check_quality_flags
from accelkit.hardware.device import check_device_name
from accelkit.results.importing import unstored_in
from accelkit.timing import LoopConfig

WORKLOAD_NAMES = ("bert", "resnet", "llm", "llm-train", "dataloader", "diffusion", "custom")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


# ---- flag notations ------------------------------------------------------------------------------------
def _list(field: str, choices: tuple[str, ...] | None = None) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        items = csv_list(text, field=field, choices=choices) or []
        if not items:
            raise UserError(f"{field} {text!r} is empty; give at least one value")
        return tuple(items)
    return parse


def _ints(field: str) -> Callable[[str], tuple[int, ...]]:
    def parse(text: str) -> tuple[int, ...]:
        try:
            return tuple(int(v) for v in _list(field)(text))
        except ValueError:
            raise UserError(f"{field} {text!r} is not valid; give whole numbers such as 0,2,4") from None
    return parse


def _bools(field: str) -> Callable[[str], tuple[bool, ...]]:
    def parse(text: str) -> tuple[bool, ...]:
        return tuple(v in ("on", "true") for v in _list(field, ("off", "on", "false", "true"))(text))
    return parse


def _number(field: str, kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise UserError(f"{field} {text!r} is not valid; give a {'whole ' if kind is int else ''}number") from None
    return parse


# ---- the options every run takes -----------------------------------------------------------------------
LOOP_FLAGS = {"warmup_iterations": "--warmup", "warmup_time_s": "--warmup-time", "min_iterations": "--min-iterations",
              "min_time_s": "--min-time", "max_iterations": "--max-iterations"}
#: loop flags are "not given" unless given: their default depends on --quick and on the suite
LOOP_PARSE = {f: _number(flag, int if "iterations" in f else float) for f, flag in LOOP_FLAGS.items()}
LOOP_HELPS = {"warmup_iterations": "Minimum warm-up iterations (default 10; --quick 3).",
              "warmup_time_s": "Minimum warm-up seconds (default 2; --quick 0.2).",
              "min_iterations": "Measure at least N iterations (default 10; --quick 5) …",
              "min_time_s": "… and at least S seconds (default 10; --quick 1).",
              "max_iterations": "Hard cap on measured iterations (default none)."}


def _suite_loop_helps() -> dict[str, str]:
    """LOOP_HELPS for `bench suite` (and `bench --suite`): a suite's loop is its own, not the workloads' default —
    `bench suite --help` said "default 10" warm-up iterations where the quick suite runs 5."""
    loops = {name: make().loop for name, make in SUITES.items()}
    quick = LoopConfig.quick()
    words = {"warmup_iterations": "Minimum warm-up iterations", "warmup_time_s": "Minimum warm-up seconds",
             "min_iterations": "Measure at least N iterations", "min_time_s": "… and at least S seconds"}
    helps = {field: f"{text} (default: the suite's — "
                    f"{', '.join(f'{name} {getattr(loop, field):g}' for name, loop in loops.items())}; "
                    f"--quick {getattr(quick, field):g}){' …' if field == 'min_iterations' else '.'}"
             for field, text in words.items()}
    return {**LOOP_HELPS, **helps}


SUITE_LOOP_HELPS = _suite_loop_helps()
MATRIX_PARSE = {"precisions": _list("--precision", PRECISIONS), "fp8_scalings": _list("--fp8-scaling",
                                                                                      ("tensorwise", "rowwise")),
                "grad_compressions": _list("--grad-compression", GRAD_COMPRESSIONS)}
MATRIX_NAMES = {"precisions": "--precision", "fp8_scalings": "--fp8-scaling", "grad_compressions": "--grad-compression"}
MATRIX_HELPS = {"precisions": "Comma list of fp32, tf32, bf16, fp16, fp8, int8 (default fp32); the first is the "
                              "baseline.",
                "fp8_scalings": "fp8 training recipes, comma list of tensorwise (SM89+), rowwise (SM90+) "
                                "(default tensorwise).",
                "grad_compressions": "Data-parallel gradient compressions (with --nproc-per-node), comma list of none, "
                                     "bf16, fp16, powersgd (default none); each is gated on its loss against none."}
#: the Matrix fields of gradient compression: only the distributed training benches take them
COMPRESSION_FIELDS = ("grad_compressions", "powersgd_rank", "powersgd_start_iter", "powersgd_error_feedback",
                      "powersgd_warm_start", "powersgd_min_compression_rate")
QuickOption = typer.Option(False, "--quick", help="Short loops (a few seconds of measuring per variant; a "
                           "full-size model on a CPU still takes minutes); percentiles flagged as not backed.")
ProgressOption = typer.Option(None, "--progress/--no-progress", help="Progress lines on stderr when it is not a "
                              "terminal: on by default, a line at least every 10 s; --no-progress turns them off (a "
                              "terminal always gets the live bar).")
#: with progress lines on, a line repeating what runs is printed after this many seconds without one, so a log
#: gets a line at least every 10 s even when the heartbeat thread is late on a busy machine
HEARTBEAT_S = 5.0


def _run_options(fn: Callable[..., Any], helps: dict[str, str] = LOOP_HELPS) -> Callable[..., Any]:
    """BenchConfig and LoopConfig options (every bench run takes them); ``helps``: the loop flags' help texts."""
    fn = spec_options(LoopConfig, into="loop", names=LOOP_FLAGS, parse=LOOP_PARSE, helps=helps)(fn)
    return spec_options(BenchConfig, into="bench", names={"auto_probe": "--probe/--no-probe"})(fn)


def _suite_run_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``_run_options`` of a suite run: the loop flags' defaults are the suite's."""
    return _run_options(fn, SUITE_LOOP_HELPS)


def _matrix(*, exclude: tuple[str, ...] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return spec_options(Matrix, into="matrix", names=MATRIX_NAMES, parse=MATRIX_PARSE, helps=MATRIX_HELPS,
                        exclude=exclude)


# ---- click classes: one-line usage errors that name what does apply -----------------------------------
class BenchCommand(TyperCommand):
    """A bench subcommand: an option it does not take is one line naming the subcommands that do."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        words = list(args)  # click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:
            if type(exc).__name__ != "NoSuchOption":
                raise
            option = getattr(exc, "option_name", "?")
            group = ctx.parent.command if ctx.parent is not None else None
            takers = [name for name, cmd in getattr(group, "commands", {}).items()
                      if any(option in p.opts or option in getattr(p, "secondary_opts", ()) for p in cmd.params)]
            help_hint = f"`accelkit bench {ctx.info_name} --help` lists its options"
            if takers:
                raise UserError(f"{option} does not apply to `bench {ctx.info_name}`; it applies to "
                                f"{', '.join(f'`bench {t}`' for t in takers)} ({help_hint})") from None
            # click reads any word starting with '-' as options ('-abc' as -a -b -c): name the word it came from
            word = next((a for a in words if a != option and a.startswith(option) and not a.startswith("--")), None)
            came = f" (read from {word!r}: a value that starts with '-' goes after `--`)" if word else ""
            raise UserError(f"no such option: {option}{came} for `bench {ctx.info_name}` ({help_hint})") from None


class BenchGroup(HelpGroup):
    """`bench`: an unknown workload gets a suggestion."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name = args[0] if args else None
        if name is not None and not name.startswith("-") and name not in self.commands:
            raise UnknownNameError("workload", name, [*WORKLOAD_NAMES, "suite"])
        return super().resolve_command(ctx, args)


app = typer.Typer(cls=BenchGroup, invoke_without_command=True, no_args_is_help=False, rich_markup_mode=None,
                  epilog=examples("accelkit bench suite quick",
                                  "accelkit bench llm-train --model tiny-llama --precision fp32,bf16 --quick",
                                  "accelkit bench custom --module mypkg.models:factory --precision fp32,bf16"),
                  help="Measure what this machine delivers: one workload across precisions, or a suite.")


# ---- progress on stderr --------------------------------------------------------------------------------
class _CliReporter(Reporter):
    """Progress on stderr: a live bar (one line per lane, one status line) on a terminal; with ``progress``
    one line per phase when stderr is not a terminal (logs, pipes), else quiet. Refusals and failures always
    print. ``progress=None``: lines whenever stderr is not a terminal (the older behaviour other commands use)."""

    def __init__(self, quiet: bool = False, progress: bool | None = None, saving: bool = True,
                 heartbeat_s: float = HEARTBEAT_S):
        self.quiet, self.saving = quiet, saving
        self.live = err.is_terminal and not quiet
        self.lines = not self.live and not quiet and progress is not False
        self.bar: Any = None
        self.tasks: dict[str, Any] = {}
        # lines mode: what runs now, and when the last line was printed (the heartbeat repeats the first after
        # heartbeat_s without the second: a BERT-large iteration on a CPU takes 20 s, a model build longer)
        self._t0 = self._last_line = time.monotonic()
        self._doing = "starting"
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        if self.lines:
            self._heartbeat = threading.Thread(target=self._beat, args=(heartbeat_s,), name="bench-heartbeat",
                                               daemon=True)
            self._heartbeat.start()
        if self.live:
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=err,
                                transient=True)
            self.bar.start()
            self.tasks["·"] = self.bar.add_task("starting", total=None, info="")

    def _line(self, text: str, *, always: bool = False) -> None:
        if self.live:
            self.bar.console.print(text, highlight=False, markup=False)
        elif self.lines or always:
            err.print(text, highlight=False, markup=False, soft_wrap=True)
            self._last_line = time.monotonic()

    def _beat(self, heartbeat_s: float) -> None:
        """Lines mode: repeat what runs after ``heartbeat_s`` without a line (checked four times as often)."""
        while not self._stop.wait(heartbeat_s / 4):
            now = time.monotonic()
            if now - self._last_line >= heartbeat_s:
                self._line(f"[{now - self._t0:5.0f} s] still running: {self._doing}")

    def refused(self, variant: str, reason: str) -> None:
        self._line(f"refused {variant}: {reason}", always=True)

    def failed(self, variant: str, phase: str, error: str) -> None:
        self._line(f"FAILED {variant} ({phase}): {error}", always=True)

    def status(self, text: str) -> None:
        self._doing = text
        if self.live:
            self.bar.update(self.tasks["·"], description=text)
        else:
            self._line(text)

    def phase(self, lane: str, text: str) -> None:
        self._doing = f"{lane}: {text}"
        if self.live:
            if lane not in self.tasks:
                self.tasks[lane] = self.bar.add_task(lane, total=1.0, info=text)
            self.bar.update(self.tasks[lane], info=text)
            self.bar.update(self.tasks["·"], description=f"{lane}: {text}")
        else:
            self._line(f"{lane}: {text}")

    def progress(self, lane: str, iterations: int, measured_s: float, loop: Any) -> None:
        self._doing = f"{lane}: measuring, {iterations} it, {measured_s:.1f} s measured"
        if not self.live or lane not in self.tasks:
            return
        frac = min(iterations / loop.min_iterations, measured_s / loop.min_time_s if loop.min_time_s else 1.0)
        self.bar.update(self.tasks[lane], completed=min(frac, 1.0), info=f"{iterations} it, {measured_s:.1f} s")

    def note(self, text: str) -> None:
        self._doing = text
        self._line(text)

    def stored(self, variant: str, result_ids: list[int]) -> None:
        ids = ", ".join(map(str, result_ids))
        why = "the store refused it; see the end" if self.saving else "--no-save"
        self._line(f"finished {variant}" + (f": stored as result {ids}" if ids else f" (not stored: {why})"))

    def close(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        if self.live:
            self.bar.stop()


# ---- checks that need no torch -------------------------------------------------------------------------
def check_workload(wl: BenchWorkload) -> None:
    """What a workload's flags name that can be checked without torch, checked before a command imports it or
    says it is starting: a custom --module (a dataloader --dataset) as :func:`check_target` checks it, and any other
    workload's model (its label resolves the preset or config.json: `bench llm --model nope` was refused after
    2 s of importing torch). A custom label would call the user's factory: not here."""
    if wl.name == "custom":
        check_target(wl.config.module)
        return
    if wl.name == "dataloader" and wl.config.dataset:
        check_target(wl.config.dataset, "--dataset")
    wl.label  # noqa: B018 — resolves the model a workload names


# ---- running ---------------------------------------------------------------------------------------------
def check_loop_flags(loop: dict[str, Any]) -> None:
    """--max-iterations below a --min-iterations also given: one line, exit 2. The cap won without a word (`--min-
    iterations 20 --max-iterations 5` measured 5). The cap alone below a default minimum is the cap, as documented."""
    low, cap = loop.get("min_iterations"), loop.get("max_iterations")
    if low is not None and cap is not None and cap < low:
        raise UserError(f"--max-iterations {cap} is below --min-iterations {low}: the cap would stop each variant "
                        f"before the minimum; raise --max-iterations to at least {low} or lower --min-iterations")


def _configs(bench: dict[str, Any], loop: dict[str, Any], quick: bool, default_loop: LoopConfig) -> BenchConfig:
    check_loop_flags(loop)
    with flag_values():
        base = LoopConfig.quick() if quick else default_loop
        return BenchConfig(**bench, loop=base.replace(**loop))


#: flags that pick a built-in model, which --model replaces (the workload's config reads --model first)
MODEL_PICKERS = {"bert": ("size",), "resnet": ("size",), "diffusion": ("arch", "size")}


def refuse_shadowed(command: str, workload: dict[str, Any], given: Callable[[str], bool]) -> None:
    """--model with a flag it replaces (``MODEL_PICKERS``), both given: one line naming both, exit 2. The model
    --model names was run and the other flag dropped without a word — `bench bert --size large --model tiny-bert`
    measured tiny-bert and stored ``size: large`` beside it in the result's config."""
    name = command.split()[-1]
    shadowed = [f for f in MODEL_PICKERS.get(name, ()) if given(f)]
    if workload.get("model") is None or not shadowed:
        return
    flags = " ".join(f"--{f} {workload[f]}" for f in shadowed)
    raise UserError(f"{flags} and --model {workload['model']} both pick the model, and --model replaces "
                    f"{'them' if len(shadowed) > 1 else 'it'}; give one (`{command} --model {workload['model']}` or "
                    f"`{command} {flags}`)")


def _given(ctx: Any) -> Callable[[str], bool]:
    """Whether the workload flag of a field was given in ``ctx``'s command (not left at its default)."""
    def given(field: str) -> bool:
        source = ctx.get_parameter_source(f"workload__{field}") if ctx is not None else None
        return source is not None and getattr(source, "name", "DEFAULT") != "DEFAULT"
    return given


def _run_workload(name: str, workload: dict[str, Any], matrix: dict[str, Any] | None, bench: dict[str, Any],
                  loop: dict[str, Any], *, quick: bool, progress: bool | None, as_json: bool,
                  dist: dict[str, Any] | None = None, quality: dict[str, Any] | None = None, ctx: Any = None) -> None:
    refuse_shadowed(f"accelkit bench {name}", workload, _given(ctx))
    config = _configs(bench, loop, quick, LoopConfig())
    check_device_name(config.device)  # --device nope: refused before torch's import and the starting line
    with flag_values():
        wl = make_workload(name, workload)
        check_workload(wl)
    # 'powersgd_rank applies to …' → '--powersgd-rank 8 …', a switch turned off by its --no- form
    with flag_values(field_flags(Matrix, MATRIX_NAMES, matrix)):
        variants = Matrix(**matrix).variants() if matrix is not None else []
    # "nnodes='2' needs rdzv_endpoint HOST:PORT" → "--nnodes '2' needs --rdzv-endpoint HOST:PORT": the flags typed
    with flag_values(field_flags(DistConfig, DIST_FLAGS, dist)):
        dist_config = _dist_config(dist)
    with flag_values(field_flags(QualityConfig, None, quality)):
        quality_config = _quality_config(quality)
    # (here, not in the distributed launch: `accelkit tune` launches with its own quality settings and no flags)
    check_quality_flags(quality_config, compressed=any(v.grad_compression != "none" for v in variants))
    # the store before measuring: an unwritable store fails now, not after it
    # --json: stdout holds the document alone — what the user's code prints (a custom factory's "loading…", a
    # dataset's, a forward's) goes to stderr while it runs; it used to come before the document and break `| jq`
    with sigterm_as_interrupt() as received, measuring(config.save) as store, \
            closing(_CliReporter(progress=progress, saving=config.save)) as reporter, \
            redirect_stdout(sys.stderr) if as_json else nullcontext():
        reporter.note(f"bench {name}: starting")
        if dist_config is not None:
            # lazy: the torchrun launcher's modules (accelkit.distributed) load only for a multi-process run
            from accelkit.distributed.bench_launch import run_distributed_bench

            result: Any = run_distributed_bench(wl, variants, config, dist_config, store=store, reporter=reporter,
                                                quality=quality_config)
        else:
            result = run_benchmark(wl, variants, config, store=store, reporter=reporter)
    _render(result, as_json, received)


def _run_suite(name: str, precision: str | None, bench: dict[str, Any], loop: dict[str, Any], *, quick: bool,
               progress: bool | None, as_json: bool) -> None:
    from accelkit.bench.suite import SUITES  # (no torch: the suites' names and their constructors)

    # bad input before the starting line: `bench suite nope` and `--precision fp64` said "starting" first
    if name not in SUITES:
        raise UnknownNameError("suite", name, SUITES)
    precisions = list(_list("--precision", PRECISIONS)(precision)) if precision is not None else None
    check_loop_flags(loop)
    with sigterm_as_interrupt() as received, closing(_CliReporter(progress=progress, saving=True)) as reporter:
        # the first line before torch and the workloads are imported (seconds on a busy machine)
        reporter.note(f"bench suite {name}{' --quick' if quick else ''}: starting")
        from accelkit.bench.suite import get_suite, run_suite  # lazy: after the first progress line (above)

        suite = get_suite(name)
        config = _configs(bench, loop, quick, suite.loop)
        reporter.saving = config.save
        reporter.note(f"bench suite {name}: {len(suite.items)} workloads ({', '.join(i.key for i in suite.items)})"
                      + (f" — {suite.duration}" if suite.duration else ""))
        with measuring(config.save) as store:
            result = run_suite(name, config, loop=config.loop, store=store, reporter=reporter, precisions=precisions)
        if result.interrupted and "SIGTERM" in received:  # one that came while a model was built: the suite saw
            result.stopped_by = "SIGTERM"                  # only the KeyboardInterrupt our handler raised
    _render(result, as_json, received)


@contextmanager
def sigterm_as_interrupt() -> Iterator[list[str]]:
    """SIGTERM (a scheduler, `timeout`, `kill`) stops a bench as Ctrl-C does — the finished variants stay stored and
    the run says so — instead of ending it silently; the list it yields names the signal once received. While the
    variants are measured, the runner's own handler does the same and records it on the run (``stopped_by``).
    A SIGTERM whose interrupt escapes the block (the command had nothing to keep yet, e.g. during the automatic
    quick probe) ends it here, ``error: terminated by SIGTERM``, exit 143 — it reached main() as a plain
    Ctrl-C, ``error: interrupted``, 130 (found in review)."""
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: Any) -> None:
        received.append("SIGTERM")
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield received
    except KeyboardInterrupt:
        if "SIGTERM" not in received:
            raise
        err.print("[bold red]error:[/] terminated by SIGTERM", highlight=False, markup=True, soft_wrap=True)
        sys.exit(SIGTERM_EXIT)
    finally:
        signal.signal(signal.SIGTERM, previous)


#: a command SIGTERM stopped exits as a shell reports a process that signal killed: 128 + 15
SIGTERM_EXIT = 128 + signal.SIGTERM


def exit_stopped(by_sigterm: bool, what: str) -> NoReturn:
    """The last line of a command a signal stopped, ``interrupted: WHAT`` (Ctrl-C, exit 130) or ``terminated by
    SIGTERM: WHAT`` (exit 143), and that exit: what it kept and what it did not."""
    err.print(f"{'terminated by SIGTERM' if by_sigterm else 'interrupted'}: {what}", highlight=False, markup=False,
              soft_wrap=True)
    sys.exit(SIGTERM_EXIT if by_sigterm else 130)


def _dist_config(dist: dict[str, Any] | None) -> Any:
    """The torchrun layout when any distributed flag differs from one process (else None)."""
    if dist is None:
        return None

    config = DistConfig.from_dict(dist)
    default = DistConfig()
    if config == default:
        return None
    if config.nproc_per_node == 1 and config.nnodes_range == (1, 1) and config.zero == 0:
        # one rank of plain data parallelism is the in-process run: torchrun would only add its start-up
        given = [DIST_FLAGS.get(f, f"--{f.replace('_', '-')}") for f in config.__dataclass_fields__
                 if getattr(config, f) != getattr(default, f)]
        raise UserError(f"{', '.join(given)} {'sets' if len(given) == 1 else 'set'} up a torchrun launch, but this run is one process on one node; add "
                        "--nproc-per-node N (or --nnodes M, or --zero 2|3) for a distributed run, or drop them")
    return config


def _quality_config(quality: dict[str, Any] | None) -> Any:
    return QualityConfig(**(quality or {}))


def shared_footnotes(notes: list[list[str]]) -> list[str]:
    """The footnotes every run of a suite has (the energy, memory and timer notes …), in the order first seen:
    printed once after the runs instead of under each. A line only some runs share stays under each of them."""
    if len(notes) < 2:
        return []
    return [line for line in dict.fromkeys(notes[0]) if all(line in lines for lines in notes[1:])]


def _render(result: Any, as_json: bool, received: list[str] | None = None) -> None:
    # lazy: report's modules load to render a result, not at every command's start-up
    from accelkit.report.phases import phase_lines, phase_table
    from accelkit.report.tables import bench_footnotes, bench_table, published_table

    data = result.to_json()
    runs = result.runs if hasattr(result, "runs") else [result]  # a suite stopped before its first run has none
    if data.get("store_error"):  # every measured variant is in the document: print it rather than lose it (exit 1)
        entries = [v for r in runs for v in r.variants]
        print_unsaved(data, AccelkitError(data["store_error"]),
                      stored=[f"{v.key} (result {v.result_id})" for v in entries if v.result_id is not None],
                      unstored=[v.key for v in entries if v.result_id is None],
                      interrupted=f"not finished: {_unfinished(runs, suite='suite' in data, result=result)}"
                      if data["interrupted"] else None, importable=bool(unstored_in(data)))

    def render() -> None:
        # a footnote every workload of a suite shares (energy, memory, timer notes …) is printed once, after them all
        notes = [bench_footnotes(run) for run in runs]
        shared = shared_footnotes(notes)
        for run, lines in zip(runs, notes, strict=True):
            if run.variants:
                out.print(whole_words(bench_table(run), out.width))
            if (phases := phase_table(run)) is not None:
                out.print(phases)
            for line in phase_lines(run):
                out.print(line, highlight=False, markup=False, soft_wrap=True)
            _grad_comm_table(run)
            for line in lines:
                if line not in shared:
                    out.print(line, highlight=False, markup=False, soft_wrap=True)
            out.print()
        if shared:
            out.print(f"every workload above ({len(runs)}):", highlight=False, markup=False)
            for line in shared:
                out.print(line, highlight=False, markup=False, soft_wrap=True)
            out.print()
        for skipped in data.get("skipped", []):
            out.print(f"skipped {skipped['key']}: {skipped['reason']}", highlight=False, markup=False)
        for failed in data.get("failed", []) if "suite" in data else []:
            out.print(f"FAILED {failed['key']}: {failed['error']}", highlight=False, markup=False)
        if data.get("published"):
            out.print(published_table(data["published"]))
        if data["result_ids"]:
            err.print(f"stored {len(data['result_ids'])} results (run {data['run_id']}); "
                      "`accelkit report` draws them", highlight=False)

    emit(data, as_json, render)
    _exit_status(result, data, runs, received)


def _exit_status(result: Any, data: dict[str, Any], runs: list[Any], received: list[str] | None) -> None:
    """After the document: Ctrl-C (130) or SIGTERM (143) with what was kept, or 1 naming the variants that failed."""
    if data["interrupted"]:
        finished = sum(len({v.name for v in r.variants}) for r in runs)
        by_term = "SIGTERM" in (received or []) or any(getattr(r, "stopped_by", None) == "SIGTERM" for r in runs) \
            or getattr(result, "stopped_by", None) == "SIGTERM"
        exit_stopped(by_term, f"kept {finished} finished variant(s) in the store (result ids "
                              f"{', '.join(map(str, data['result_ids'])) or 'none'}); not finished: "
                              f"{_unfinished(runs, suite='suite' in data, result=result)}")
    failed = [f"{f.name} ({f.phase})" for r in runs for f in r.failed] + [f["key"] for f in data.get("failed", [])
                                                                          if isinstance(f, dict) and "key" in f]
    if failed:
        err.print(f"error: {len(failed)} variant(s) failed: {', '.join(failed)} — their errors are above; "
                  f"{_the_others(runs)}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(1)


def _the_others(runs: list[Any]) -> str:
    """What became of the variants that did not fail: it said 'the others were measured and stored' when every
    variant had failed, or under --no-save."""
    measured = {(i, v.name) for i, r in enumerate(runs) for v in r.variants}  # a suite's items reuse names
    if not measured:
        return "no variant was measured"
    stored = {(i, v.name) for i, r in enumerate(runs) for v in r.variants if v.result_id is not None}
    what = f"the other {len(measured)} {'was' if len(measured) == 1 else 'were'} measured"
    if stored == measured:
        return f"{what} and stored"
    if stored:
        return f"{what}, {len(stored)} of them stored"
    return f"{what}, none stored" + ("" if any(getattr(r, "store_error", None) for r in runs) else " (--no-save)")


def _unfinished(runs: list[Any], *, suite: bool, result: Any = None) -> str:
    """The variants Ctrl-C left unfinished, for the interrupted message; a suite's per workload, and the workloads
    it never ran."""
    if suite and hasattr(result, "unfinished_text"):
        return str(result.unfinished_text())
    return ", ".join(u for r in runs for u in r.unfinished) or ("the rest of the suite" if suite else "none")


def _grad_comm_table(run: Any) -> None:
    """With --grad-compression: bytes per step per rank (counted vs the planner) and the quality gate per variant."""
    rows = [_grad_comm_row(v.name, v.grad_comm, v.quality) for v in run.variants
            if v.grad_comm is not None or v.quality is not None]
    if not rows:
        return
    out.print(table("gradient communication per step per rank (counted in the hook) and the quality gate",
                    ["variant", "bytes/step", "× plain", "planned", "counted ÷ planned", "final loss", "loss × none", "gate"],
                    rows, right=(1, 2, 3, 4, 5, 6)))
    for v in run.variants:
        if v.quality and v.quality.get("message"):
            out.print(v.quality["message"], highlight=False, markup=False, soft_wrap=True)


def _grad_comm_row(name: str, comm: dict[str, Any] | None, quality: dict[str, Any] | None) -> list[Any]:
    """One variant's row: the most bytes a rank sent per step, × its plain gradients, the planner's figure, the ratio
    farthest from 1, and the quality gate (final loss, × none's, verdict)."""
    return [name, *_comm_cells(comm or {}), *_quality_cells(quality or {})]


def _comm_cells(comm: dict[str, Any]) -> list[str | None]:
    measured = comm.get("measured_bytes_per_step") or []
    ratios = [r for r in comm.get("ratio_per_rank") or [] if r is not None]
    sent = [r for r in comm.get("sent_over_gradient") or [] if r is not None]
    return [fmt_bytes(max(measured)) if measured else None,
            f"{max(sent):.3f}" if sent else None,
            fmt_bytes(comm["predicted_bytes_per_step"]) if comm.get("predicted_bytes_per_step") else None,
            f"{max(ratios, key=lambda r: abs(r - 1)):.3f}" if ratios else None]


def _quality_cells(quality: dict[str, Any]) -> list[str | None]:
    gate = "reference" if quality.get("role") == "reference" else (
        None if "passed" not in quality else
        "inconclusive" if quality.get("inconclusive") else ("pass" if quality["passed"] else "FAIL"))
    loss = quality.get("final_loss") if quality.get("role") == "candidate" else None
    return [fmt_num(loss, 4), None if quality.get("ratio") is None else f"{quality['ratio']:.4f}", gate]


# ---- the commands ----------------------------------------------------------------------------------------
SuiteOption = typer.Option(None, "--suite", help="quick or reference: the same as `accelkit bench suite NAME`.")
SuitePrecision = typer.Option(None, "--precision", help="Comma list replacing the suite's own precisions.")


@app.callback()
@_suite_run_options  # its loop flags serve only `--suite NAME` (after a workload they are refused)
def bench_root(
    ctx: typer.Context,
    suite: str = SuiteOption,
    precision: str | None = SuitePrecision,
    quick: bool = QuickOption,
    progress: bool | None = ProgressOption,
    as_json: bool = JsonOption,
    *,
    bench: dict[str, Any],
    loop: dict[str, Any],
) -> None:
    """Measure what this machine delivers on a reference workload or your model, across precisions.

    `accelkit bench WORKLOAD --help` lists what each workload takes; `accelkit bench suite quick` runs them all."""
    if ctx.invoked_subcommand is not None:
        if suite is not None:
            raise UserError(f"--suite {suite} and `bench {ctx.invoked_subcommand}` are two runs; give one "
                            f"(`accelkit bench suite {suite}` or `accelkit bench {ctx.invoked_subcommand} …`)")
        given = [p.opts[0] for p in ctx.command.params if p.name is not None
                 and getattr(ctx.get_parameter_source(p.name), "name", "DEFAULT") != "DEFAULT"]
        if given:
            raise UserError(f"put {', '.join(given)} after the workload: "
                            f"`accelkit bench {ctx.invoked_subcommand} {' '.join(given)} …`")
        return
    if suite is None:
        raise UserError("give a workload (bert, resnet, llm, llm-train, dataloader, diffusion, custom) or a suite: "
                        "`accelkit bench suite quick|reference`")
    _run_suite(suite, precision, bench, loop, quick=quick, progress=progress, as_json=as_json)


@app.command("suite", cls=BenchCommand, epilog=examples(
    "accelkit bench suite quick                # tiny sizes of every workload",
    "accelkit bench suite reference --quick    # the published-comparison sizes, short loops",
))
@_suite_run_options
def suite_cmd(
    name: str = typer.Argument(..., help="quick (tiny sizes of every workload, about a minute on a CPU) or reference "
                                         "(BERT-large, ResNet-50 training, Llama-3.1-8B decode, SDXL text-to-image; "
                                         "published figures beside ours on a catalog GPU)."),
    precision: str | None = SuitePrecision,
    quick: bool = QuickOption,
    progress: bool | None = ProgressOption,
    as_json: bool = JsonOption,
    *,
    bench: dict[str, Any],
    loop: dict[str, Any],
) -> None:
    """Run a named suite: every workload in it, each with the precisions that suit the device."""
    _run_suite(name, precision, bench, loop, quick=quick, progress=progress, as_json=as_json)


@app.command("bert", cls=BenchCommand, epilog=examples(
    "accelkit bench bert --size tiny --precision fp32,bf16 --quick",
    "accelkit bench bert --size large --precision fp32,bf16,fp16 --batch-size 32",
))
@_run_options
@_matrix(exclude=("recompute", "channels_last", "fp8_scalings", *COMPRESSION_FIELDS))
@spec_options(BertConfig, into="workload")
def bert_cmd(ctx: typer.Context, quick: bool = QuickOption, progress: bool | None = ProgressOption,
             as_json: bool = JsonOption, *, workload: dict[str, Any], matrix: dict[str, Any], bench: dict[str, Any],
             loop: dict[str, Any]) -> None:
    """Encoder inference (BERT tiny/base/large): samples/s."""
    _run_workload("bert", workload, matrix, bench, loop, quick=quick, progress=progress, as_json=as_json, ctx=ctx)


@app.command("llm", cls=BenchCommand, epilog=examples(
    "accelkit bench llm --model tiny-llama --precision fp32,bf16 --quick",
    "accelkit bench llm --model llama-3.1-8b --precision bf16 --batch-size 8 --prompt-len 1024",
))
@_run_options
@_matrix(exclude=("recompute", "channels_last", "fp8_scalings", *COMPRESSION_FIELDS))
@spec_options(LLMConfig, into="workload")
def llm_cmd(quick: bool = QuickOption, progress: bool | None = ProgressOption, as_json: bool = JsonOption, *,
            workload: dict[str, Any], matrix: dict[str, Any], bench: dict[str, Any], loop: dict[str, Any]) -> None:
    """Decoder inference: prefill (TTFT) and decode (per-token latency, tokens/s)."""
    _run_workload("llm", workload, matrix, bench, loop, quick=quick, progress=progress, as_json=as_json)


def _seconds(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise UserError(f"{flag} {text!r} is not valid; give seconds, e.g. 1800") from None
        if math.isnan(value):
            raise UserError(f"{flag} {text!r} is not a number; give seconds, e.g. 1800")
        return value  # the field's bounds (1 s to a week) are checked by spec_options, naming the flag
    return parse


#: DistConfig flags spelled otherwise than --field-name, and how they are read (also `hw probe --collectives`'s)
DIST_FLAGS = {"collective_timeout_s": "--collective-timeout"}
def _zero(text: str) -> int:
    """``--zero``: 0, 2 or 3; ZeRO-1 said apart (the choice error named the three and not why)."""
    value = text.strip()
    if value == "1":
        raise UserError("--zero 1 (ZeRO-1: optimizer states sharded, gradients not) is not offered: torch's FSDP2 "
                        "shards gradients with them; give --zero 2 (the same memory for the states, gradients sharded "
                        "too), 3 (parameters as well) or 0 (DDP) — `accelkit plan --zero 1` models ZeRO-1")
    if value not in ("0", "2", "3"):
        raise UserError(f"--zero {text!r} is not a stage; give 0 (DDP), 2 or 3 (FSDP2)")
    return int(value)


DIST_PARSE = {"collective_timeout_s": _seconds("--collective-timeout"), "zero": _zero}


def collective_timeout_option(needs: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--collective-timeout` alone, for a command whose ranks are launched only with ``needs`` (a flag)."""
    return spec_options(DistConfig, into="dist", only=("collective_timeout_s",), names=DIST_FLAGS, parse=DIST_PARSE,
                        helps={"collective_timeout_s": f"{needs}: seconds a rank waits in one collective for its peers "
                                                       "before it fails (1 to 604800; default 600)."})


def _dist_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    return spec_options(QualityConfig, into="quality")(
        spec_options(DistConfig, into="dist", names=DIST_FLAGS, parse=DIST_PARSE)(fn))


@app.command("llm-train", cls=BenchCommand, epilog=examples(
    "accelkit bench llm-train --model tiny-llama --precision fp32,bf16 --quick",
    "accelkit bench llm-train --model tiny-llama --nproc-per-node 2 --zero 3 --quick",
))
@_run_options
@_dist_options
@_matrix(exclude=("channels_last",))
@spec_options(LLMTrainConfig, into="workload")
def llm_train_cmd(quick: bool = QuickOption, progress: bool | None = ProgressOption, as_json: bool = JsonOption, *,
                  workload: dict[str, Any], matrix: dict[str, Any], dist: dict[str, Any], quality: dict[str, Any],
                  bench: dict[str, Any], loop: dict[str, Any]) -> None:
    """Decoder training step (AdamW): tokens/s, MFU and the loss of the first steps; distributed with
    --nproc-per-node (DDP, or FSDP2 with --zero 2|3), gradient compression with --grad-compression."""
    _run_workload("llm-train", workload, matrix, bench, loop, quick=quick, progress=progress, as_json=as_json,
                  dist=dist, quality=quality)


@app.command("resnet", cls=BenchCommand, epilog=examples(
    "accelkit bench resnet --size tiny --precision fp32,bf16 --quick",
    "accelkit bench resnet --size 50 --precision bf16 --channels-last --compile",
))
@_run_options
@_dist_options
@_matrix()
@spec_options(ResNetConfig, into="workload")
def resnet_cmd(ctx: typer.Context, quick: bool = QuickOption, progress: bool | None = ProgressOption,
               as_json: bool = JsonOption, *, workload: dict[str, Any], matrix: dict[str, Any], dist: dict[str, Any],
               quality: dict[str, Any], bench: dict[str, Any], loop: dict[str, Any]) -> None:
    """Image-classification training step with SGD (ResNet-50/152/tiny): images/s; distributed with
    --nproc-per-node, gradient compression with --grad-compression."""
    _run_workload("resnet", workload, matrix, bench, loop, quick=quick, progress=progress, as_json=as_json,
                  dist=dist, quality=quality, ctx=ctx)


ATTENTION_BACKENDS = ("default", "flash", "efficient", "cudnn", "math")


@app.command("diffusion", cls=BenchCommand, epilog=examples(
    "accelkit bench diffusion --arch sd3 --size tiny --quick",
    "accelkit bench diffusion --arch sdxl --size full --precision bf16 --steps 20",
))
@_run_options
@_matrix(exclude=("recompute", "fp8_scalings", *COMPRESSION_FIELDS))
@spec_options(DiffusionConfig, into="workload", parse={"attention": _list("--attention", ATTENTION_BACKENDS)},
              helps={"attention": "SDPA backends, comma list of default, flash, efficient, cudnn, math (efficient, "
                                  "cudnn: CUDA only); each but default is its own variant (default: default)."})
def diffusion_cmd(ctx: typer.Context, quick: bool = QuickOption, progress: bool | None = ProgressOption,
                  as_json: bool = JsonOption, *, workload: dict[str, Any], matrix: dict[str, Any],
                  bench: dict[str, Any], loop: dict[str, Any]) -> None:
    """Text-to-image generation through diffusers (SD3 MMDiT, FLUX, SDXL UNet): images/s, s/image, the phases
    inside a call (text encoders, denoiser steps, VAE decode) with their MFU, J/image, an image accuracy gate."""
    _run_workload("diffusion", workload, matrix, bench, loop, quick=quick, progress=progress, as_json=as_json,
                  ctx=ctx)


@app.command("custom", cls=BenchCommand, epilog=examples(
    "accelkit bench custom --module mypkg.models:factory --precision fp32,bf16",
))
@_run_options
@_matrix(exclude=COMPRESSION_FIELDS)
@spec_options(CustomConfig, into="workload", exclude=("module",))
def custom_cmd(
    module: str | None = typer.Option(None, "--module", help=CustomConfig.__dataclass_fields__["module"].metadata["doc"]),
    quick: bool = QuickOption, progress: bool | None = ProgressOption, as_json: bool = JsonOption, *,
    workload: dict[str, Any], matrix: dict[str, Any], bench: dict[str, Any], loop: dict[str, Any],
) -> None:
    """Your model: --module package.module:factory → (model, example_inputs[, loss_fn])."""
    if module is None:
        raise UserError("`bench custom` needs --module package.module:factory")
    _run_workload("custom", {**workload, "module": module}, matrix, bench, loop, quick=quick, progress=progress,
                  as_json=as_json)


@app.command("dataloader", cls=BenchCommand, epilog=examples(
    "accelkit bench dataloader --num-workers 0,2 --quick",
    "accelkit bench dataloader --dataset mypkg.data:dataset --batch-size 128 --step-time 0.25",
))
@_run_options
@spec_options(DataLoaderConfig, into="workload", names={"step_time_s": "--step-time"},
              parse={"num_workers": _ints("--num-workers"), "pin_memory": _bools("--pin-memory"),
                     "prefetch_factor": _ints("--prefetch-factor")},
              helps={"num_workers": "Worker process counts to try, comma list (default 0,2).",
                     "pin_memory": "pin_memory settings to try, comma list of off,on (default off).",
                     "prefetch_factor": "Batches prefetched per worker, comma list (default 2)."})
def dataloader_cmd(ctx: typer.Context, quick: bool = QuickOption, progress: bool | None = ProgressOption,
                   as_json: bool = JsonOption, *, workload: dict[str, Any], bench: dict[str, Any],
                   loop: dict[str, Any]) -> None:
    """Input-pipeline throughput across DataLoader settings, and whether --step-time would be input-bound."""
    workers = workload.get("num_workers")
    if _given(ctx)("prefetch_factor") and workers is not None and not any(w > 0 for w in workers):
        # prefetching is what worker processes do: with none, the settings were run once, the flag dropped unsaid
        raise UserError(f"--prefetch-factor {','.join(map(str, workload['prefetch_factor']))} applies to worker "
                        f"processes, and --num-workers {','.join(map(str, workers))} starts none; add a count above 0 "
                        "(e.g. --num-workers 0,2) or drop --prefetch-factor")
    _run_workload("dataloader", workload, None, bench, loop, quick=quick, progress=progress, as_json=as_json)
