"""CLI flags generated from config specs say what the specs say: same default, same help, same bounds."""

import dataclasses

import typer

from accelkit.cli.app import app
from accelkit.cli.spec_options import _for_users, generated_options


def _commands():
    """(path, click command, the function typer wraps) for every command of the app."""
    root = typer.main.get_command(app)

    def walk(group, path):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                yield from walk(cmd, (*path, name))
            else:
                yield (*path, name), cmd, cmd.callback

    yield from walk(root, ())


def _bound(fn):
    """The spec bindings of a command function (typer wraps the original; follow __wrapped__ up)."""
    while fn is not None:
        if hasattr(fn, "spec_options"):
            return fn.spec_options
        fn = getattr(fn, "__wrapped__", None)
    return []


def test_generated_flags_match_their_spec_fields():
    checked = 0
    for path, cmd, fn in _commands():
        params = {p.opts[0]: p for p in cmd.params if p.opts}
        for spec, options in _bound(fn):
            fields = {f.name: f for f in dataclasses.fields(spec)}
            for o in options:
                param = params[o.flag.split("/")[0]]
                f = fields[o.field]
                if o.required:  # a field without a default: a required flag
                    assert f.default is dataclasses.MISSING and param.required, (path, o.flag)
                else:
                    expected_default = None if o.parse is not None or o.optional else f.default
                    assert param.default == expected_default, (path, o.flag, param.default, f.default)
                # the field's doc, in flag words: "None = …" reads "not given: …" (a flag user never types None)
                assert param.help == (o.help if o.custom_help else _for_users(f.metadata["doc"])), (path, o.flag)
                lo, hi = f.metadata.get("min"), f.metadata.get("max")
                if o.parse is None and (lo is not None or hi is not None):
                    assert (param.min, param.max) == (lo, hi), (path, o.flag)
                checked += 1
    # serve 15, loadtest 20, tune 7, profile 6, hw probe 5, monitor 3, sweep 1 — and more as other commands move over
    assert checked >= 57, checked


def test_serve_flags_are_the_engine_defaults():
    """The drift that motivated generation: `serve --max-num-seqs` defaulted to 64, EngineConfig to 256."""
    from accelkit.serve.config import EngineConfig

    (opts,) = [o for spec, o in _bound(next(fn for p, _, fn in _commands() if p == ("serve",))) if spec is EngineConfig]
    by_field = {o.field: o for o in opts}
    assert by_field["max_num_seqs"].default == EngineConfig.__dataclass_fields__["max_num_seqs"].default
    assert {"dtype", "kv_cache_dtype", "block_size", "max_num_batched_tokens", "seed"} <= set(by_field)


def test_a_spec_option_naming_an_unknown_field_is_refused():
    import pytest

    from accelkit.serve.config import EngineConfig

    with pytest.raises(TypeError, match="no field 'max_seqs'"):
        generated_options(EngineConfig, into="engine", names={"max_seqs": "--x"})


# commands of other areas still declaring `x: str = typer.Option(None)` (#16 item 3): listed so that the check below
# covers every other command now and fails once one of these is fixed (then remove it from the list)
NOT_YET_TYPED: set[tuple[str, ...]] = set()


def _untyped_optionals(fn):
    """Parameters whose default is None while the annotation does not admit None (`str = typer.Option(None)`)."""
    import inspect
    import types
    import typing

    hints = typing.get_type_hints(fn)
    bad = []
    for name, p in inspect.signature(fn).parameters.items():
        default = getattr(p.default, "default", p.default)
        if default is not None:
            continue
        tp = hints.get(name, p.annotation)
        if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp):
            continue
        bad.append(name)
    return bad


def test_optional_options_are_typed_optional():
    """`str = typer.Option(None)` lies about the type (mypy and typer both read it): optional flags are `T | None`."""
    untyped, fixed = {}, []
    for path, _, fn in _commands():
        bad = _untyped_optionals(fn)
        if bad and path not in NOT_YET_TYPED:
            untyped[path] = bad
        if not bad and path in NOT_YET_TYPED:
            fixed.append(path)
    assert not untyped, untyped
    assert not fixed, f"typed now: remove {fixed} from NOT_YET_TYPED"


def test_spec_options_required_optional_and_only():
    """The extensions the measuring commands use: a field without a default is a required flag; ``optional``
    flags default to None and stay out of the dict when not given; ``only`` picks fields; parse errors and
    bounds name the flag."""
    from dataclasses import dataclass

    import pytest
    from typer.testing import CliRunner

    from accelkit.cli.spec_options import spec_options
    from accelkit.core import UserError
    from accelkit.core.spec import Spec, spec_field

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Demo(Spec):
        url: str = spec_field(doc="Where.")
        workers: int = spec_field(1, min=1, max=8, doc="Pool size.")
        size_bytes: int = spec_field(1024, min=1024, doc="Bytes.")
        other: int = spec_field(3, doc="Not generated.")

    def size(text):
        return int(text.rstrip("B"))

    seen = {}
    app = typer.Typer()

    @app.command()
    @spec_options(Demo, into="demo", only=("url", "workers", "size_bytes"), optional=("workers",),
                  names={"size_bytes": "--size"}, parse={"size_bytes": size})
    def cmd(*, demo):
        seen.update(demo)

    runner = CliRunner()
    assert runner.invoke(app, []).exit_code == 2  # --url is required
    assert runner.invoke(app, ["--url", "x"]).exit_code == 0
    assert seen == {"url": "x"}  # workers and size not given: left to the spec's defaults
    assert runner.invoke(app, ["--url", "x", "--workers", "9"]).exit_code == 2  # bounds kept on an optional flag
    assert runner.invoke(app, ["--url", "x", "--workers", "4", "--size", "2048B"]).exit_code == 0
    assert seen == {"url": "x", "workers": 4, "size_bytes": 2048}
    result = runner.invoke(app, ["--url", "x", "--size", "12B"])
    assert isinstance(result.exception, UserError) and "--size '12B' is out of range" in str(result.exception)
    result = runner.invoke(app, ["--url", "x", "--size", "lots"])
    assert isinstance(result.exception, UserError) and "--size 'lots' is not valid" in str(result.exception)
    with pytest.raises(TypeError, match="no field 'nope'"):
        generated_options(Demo, into="d", only=("nope",))


def test_an_optional_bool_field_gets_both_flags_and_none_when_absent():
    """``bool | None`` (None = decide automatically, e.g. EngineConfig.overlap_postprocess): ``--x`` and
    ``--no-x`` both exist, so a user can force either way, and leaving both out keeps the automatic choice."""
    from dataclasses import dataclass

    from typer.testing import CliRunner

    from accelkit.cli.spec_options import spec_options
    from accelkit.core.spec import Spec, spec_field

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Demo(Spec):
        overlap: bool | None = spec_field(None, doc="None = automatic.")

    seen = []
    app = typer.Typer()

    @app.command()
    @spec_options(Demo, into="demo")
    def run(demo: dict) -> None:
        seen.append(Demo(**demo).overlap)

    for args in ([], ["--overlap"], ["--no-overlap"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    assert seen == [None, True, False]
