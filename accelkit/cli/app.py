"""The `accelkit` command: a thin typer shell over the library. User mistakes become one sentence on
stderr and exit code 2; runtime failures exit 1; never a traceback for a user mistake."""

from __future__ import annotations

import sys

import typer

import accelkit
from accelkit.cli import bench, hw, loadtest, models, monitor, plan, report, results, serve, sweep, tune
from accelkit.cli.output import err
from accelkit.core import AccelkitError, UserError

app = typer.Typer(
    name="accelkit",
    help="Plan, measure, optimize and serve deep-learning workloads on accelerators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(hw.app, name="hw")
app.add_typer(models.app, name="models")
app.add_typer(results.app, name="results")
app.add_typer(bench.app, name="bench")
app.command("plan")(plan.plan_cmd)
app.command("report")(report.report_cmd)
app.command("tune")(tune.tune_cmd)
app.command("sweep")(sweep.sweep_cmd)
app.command("serve")(serve.serve_cmd)
app.command("loadtest")(loadtest.loadtest_cmd)
app.command("monitor")(monitor.monitor_cmd)
app.command("profile")(monitor.profile_cmd)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"accelkit {accelkit.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """accelkit — plan · measure · optimize · serve."""


def _fail(message: str, code: int) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    sys.exit(code)


def _click_errors() -> tuple[type[BaseException], ...]:
    """Usage-error classes: typer >= 0.26 vendors click as ``typer._click``; older typer uses click."""
    classes: list[type[BaseException]] = [typer.TyperException] if hasattr(typer, "TyperException") else []
    try:
        import click

        classes.append(click.ClickException)
    except ImportError:
        pass
    return tuple(classes)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        app(args=argv, standalone_mode=False, prog_name="accelkit")
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _fail("interrupted", 130)
    except _click_errors() as exc:  # bad flag or argument: the parser's message, exit 2
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
            sys.exit(0)
        _fail(exc.format_message(), getattr(exc, "exit_code", 2))  # type: ignore[attr-defined]
    except KeyboardInterrupt:
        _fail("interrupted; finished results are kept in the store", 130)
    except UserError as exc:
        _fail(str(exc), 2)
    except AccelkitError as exc:
        _fail(str(exc), 1)
