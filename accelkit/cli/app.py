"""The `accelkit` command: a thin typer shell over the library. User mistakes become one sentence on
stderr and exit code 2; runtime failures exit 1; never a traceback for a user mistake."""

from __future__ import annotations

import contextlib
import errno
import re
import sys
from typing import NoReturn

import typer
from rich.markup import escape

import accelkit
from accelkit.cli import bench, hw, loadtest, models, monitor, plan, report, results, serve, sweep, tune
from accelkit.cli.helptext import HelpGroup, examples
from accelkit.cli.output import err
from accelkit.core import AccelkitError, UserError

app = typer.Typer(
    name="accelkit",
    cls=HelpGroup,
    help="Plan, measure, optimize and serve deep-learning workloads on accelerators.",
    epilog=examples(
        "accelkit plan --model llama-3.1-70b --task train --hardware h100 --num-devices 64",
        "accelkit hw probe --quick",
        "accelkit bench llm-train --model tiny-llama --precision fp32,bf16 --quick",
        "accelkit report --out report.html",
        "accelkit COMMAND --help          # every command's flags, with examples",
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# in the README's order ("What works today"): each command under the first question the README lists it for
app.command("plan", rich_help_panel="Plan", epilog=plan.EXAMPLES)(plan.plan_cmd)
app.add_typer(models.app, name="models", rich_help_panel="Plan")
app.add_typer(hw.app, name="hw", rich_help_panel="Plan")
app.add_typer(bench.app, name="bench", rich_help_panel="Measure")
app.command("report", rich_help_panel="Measure", epilog=report.EXAMPLES)(report.report_cmd)
app.command("profile", rich_help_panel="Measure", epilog=monitor.PROFILE_EXAMPLES)(monitor.profile_cmd)
app.command("tune", rich_help_panel="Optimize", epilog=tune.EXAMPLES)(tune.tune_cmd)
app.command("serve", rich_help_panel="Serve", epilog=serve.EXAMPLES)(serve.serve_cmd)
app.command("loadtest", rich_help_panel="Observe", epilog=loadtest.EXAMPLES)(loadtest.loadtest_cmd)
app.command("monitor", rich_help_panel="Observe", epilog=monitor.MONITOR_EXAMPLES)(monitor.monitor_cmd)
app.command("sweep", rich_help_panel="Scale", epilog=sweep.EXAMPLES)(sweep.sweep_cmd)
app.add_typer(results.app, name="results", rich_help_panel="Results")

def _version(value: bool) -> None:
    if value:
        typer.echo(f"accelkit {accelkit.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """accelkit — plan · measure · optimize · serve."""


def _fail(message: str, code: int) -> NoReturn:
    # one line, whatever the message was built from (YAML errors span lines); other whitespace stays as it was — a
    # value the message quotes (a no-break space in a file name) must read as given
    message = re.sub(r"[ \t]*[\r\n]+[ \t]*", " ", message).strip()
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True, soft_wrap=True)
    sys.exit(code)


#: set to 1 to see the traceback of an unexpected error (a bug) instead of its one-line summary
DEBUG_ENV = "ACCELKIT_DEBUG"
#: how an unexpected exception is summed up; the CLI fuzz test counts these as failures
INTERNAL_ERROR = "internal error"


def _click_errors() -> tuple[type[BaseException], ...]:
    """Usage-error classes: typer >= 0.26 vendors click as ``typer._click``; older typer uses click."""
    classes: list[type[BaseException]] = [typer.TyperException] if hasattr(typer, "TyperException") else []
    try:
        import click

        classes.append(click.ClickException)
    except ImportError:
        pass
    return tuple(classes)


def _usage_message(exc: BaseException) -> str:
    """The parser's message, plus the value given when typer's validator (pydantic) dropped it."""
    message: str = exc.format_message()  # type: ignore[attr-defined]
    message = message.replace(": Value error, ", ": ")  # pydantic's prefix for a failed check says nothing
    errors = getattr(exc.__cause__, "errors", None)
    if callable(errors):
        try:
            given = errors()[0].get("input")
        except (IndexError, TypeError, AttributeError):
            given = None
        if given is not None and repr(given) not in message:
            message += f" (got {given!r})"
    return message


def _quiet_broken_pipe() -> NoReturn:
    """stdout's reader went away (`| head`): stop quietly, as Unix tools do."""
    import os

    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(1)


def _registered(t: typer.Typer) -> tuple[int, ...]:
    """Identities of what is registered on ``t`` and its sub-apps: they change when a command is added."""
    ids = [id(c) for c in t.registered_commands]
    for group in t.registered_groups:
        ids.append(id(group))
        if group.typer_instance is not None:
            ids.extend(_registered(group.typer_instance))
    return tuple(ids)


_built: list[tuple[tuple[int, ...], typer.core.TyperGroup]] = []  # (what was registered, the command built from it)


def _command() -> typer.core.TyperGroup:
    """The click command typer builds from ``app``: ~30 ms of building, once per process (a caller running
    :func:`main` many times in one process — the tests — pays it once), built again if a command was added since."""
    key = _registered(app)
    if not _built or _built[0][0] != key:
        _built[:] = [(key, typer.main.get_command(app))]  # type: ignore[list-item]
    return _built[0][1]


def _run(argv: list[str] | None) -> None:
    """The command, as ``app(args, standalone_mode=False)`` runs it but with every exception left to :func:`main`:
    typer turns a Ctrl-C into a *returned* 130 (older typer: an ``Abort``) and returns the code of a command's
    ``typer.Exit`` instead of raising it when it is not standalone, so a Ctrl-C or an ``Exit(1)`` exited 0."""
    command = _command()
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"]:  # vLLM's argparse forms of a pasted `vllm serve` line
        from accelkit.cli.serve import vllm_argv

        args = ["serve", *vllm_argv(args[1:])]
    with command.make_context("accelkit", args) as ctx:
        command.invoke(ctx)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user mistakes exit 2, runtime failures 1, each with one ``error:`` line; Ctrl-C
    exits 130 (a command that keeps what it finished — bench, tune, sweep — says what it kept before it exits)."""
    try:
        _run(argv)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:  # a prompt's Ctrl-C or end of input (click's own)
        _fail("interrupted", 130)
    except _click_errors() as exc:  # bad flag or argument: the parser's message, exit 2
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
            sys.exit(0)
        _fail(_usage_message(exc), getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:  # only what is true of every command: bench, tune, sweep and loadtest say more
        _fail("interrupted", 130)
    except UserError as exc:
        _fail(str(exc), 2)
    except AccelkitError as exc:
        _fail(str(exc), 1)
    except BrokenPipeError:
        _quiet_broken_pipe()
    except OSError as exc:
        if exc.errno not in _NO_ROOM:
            _internal_error(exc)
        where = f" to {exc.filename}" if exc.filename else ""
        _fail(f"writing{where} failed: {exc.strerror or exc}; free some space or write elsewhere", 1)
    except Exception as exc:  # a bug: one line for the user, the traceback on request
        _internal_error(exc)


#: a write that found no room (a full disk — or standard output sent to /dev/full —, a quota, a file-size limit):
#: said as such, not as a bug
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _internal_error(exc: BaseException) -> NoReturn:
    import os

    if os.environ.get(DEBUG_ENV):
        raise exc
    _fail(f"{INTERNAL_ERROR} ({type(exc).__name__}: {exc}) — a bug in accelkit; rerun with {DEBUG_ENV}=1 "
          "to see the traceback, and please report it", 1)
