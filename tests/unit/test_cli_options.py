"""CLI flags generated from config specs say what the specs say: same default, same help, same bounds."""

import dataclasses

import typer

from accelkit.cli.app import app
from accelkit.cli.spec_options import generated_options


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
                expected_default = None if o.parse is not None else f.default
                assert param.default == expected_default, (path, o.flag, param.default, f.default)
                if o.parse is None:
                    assert param.help == f.metadata["doc"], (path, o.flag)
                lo, hi = f.metadata.get("min"), f.metadata.get("max")
                if o.parse is None and (lo is not None or hi is not None):
                    assert (param.min, param.max) == (lo, hi), (path, o.flag)
                checked += 1
    assert checked >= 15  # serve alone generates 17


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
