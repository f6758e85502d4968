"""CLI options generated from a ``Spec``'s fields, so a flag can never drift from the config it fills.

Each field becomes ``--field-name`` with the field's type (``Literal`` → choices, ``int | None`` → an optional
int), its default, its doc as the help text and its ``min``/``max`` as click's range check — the same
facts ``Spec.__post_init__`` validates. A command declares its own options as usual and names the specs it
fills::

    @spec_options(EngineConfig, into="engine", exclude=("model",), names={"enable_prefix_caching": "--prefix-caching"})
    def serve_cmd(port: int = typer.Option(8000, "--port"), *, engine: dict[str, Any]) -> None:
        config = EngineConfig(model=..., **engine)

The command receives the generated options' values as one dict (field name → value, every field present,
defaults included). Fields typed as containers (tuples, lists, dicts, nested specs) are not generated unless a
``parse`` function turns the flag's text into the value; ``parse`` also serves scalar fields whose flag takes
another notation (``--kv-cache-memory 2GiB`` for ``kv_cache_memory_bytes``): such a flag defaults to ``None``
and the field keeps its spec default when the flag is not given. A ``ValueError`` from ``parse``, or a parsed
number outside the field's bounds, is a usage error (exit 2) that names the flag and the text given. So is a float
flag given inf, -inf or a number past ±1.8e308 (which reads as inf) whose field is declared finite
(``spec_field(..., finite=True)``: the spec's own rule, worded here for the flag) — a plan's --target-tokens-per-s
inf searched 65,536 devices and printed a warning; a field where inf means something (--request-rate inf: every
request at once) is not declared so. Any float flag given NaN says that it is not a number, with the flag's range
and an example (typer's range check said ``--max-accuracy-drop nan`` should be "less than or equal to 1"). A field
without a default becomes a required flag.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import typer

from accelkit.core import UserError
from accelkit.core.spec import Spec, finite_fix

F = TypeVar("F", bound=Callable[..., Any])
_SCALARS = (bool, int, float, str)


@dataclasses.dataclass(frozen=True, slots=True)
class GeneratedOption:
    """One generated flag: the field it fills and how it was declared."""

    field: str
    flag: str  # the primary flag, e.g. --max-num-seqs
    param: str  # the Python parameter name typer sees
    default: Any
    help: str
    parse: Callable[[str], Any] | None
    required: bool = False  # the field has no default: the flag must be given
    optional: bool = False  # the flag defaults to None (not given: the field keeps its own default)
    custom_help: bool = False  # the command gave its own help text (``helps``) instead of the field's doc
    finite: bool = False  # the field refuses inf (``spec_field(finite=True)``): the flag says so in its own words
    aliases: tuple[str, ...] = ()  # further spellings of the flag (``aliases``), e.g. vLLM's --enable-prefix-caching


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _is_scalar(tp: Any) -> bool:
    """bool/int/float/str, a Literal of scalars, or one of those | None."""
    origin = get_origin(tp)
    if origin is Literal:
        return all(isinstance(a, _SCALARS) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        arms = [a for a in get_args(tp) if a is not type(None)]
        return len(arms) == 1 and _is_scalar(arms[0])
    return tp in _SCALARS


def generated_options(
    spec: type[Spec], *, into: str, exclude: Iterable[str] = (), names: Mapping[str, str] | None = None,
    parse: Mapping[str, Callable[[str], Any]] | None = None, helps: Mapping[str, str] | None = None,
    only: Iterable[str] | None = None, optional: Iterable[str] = (),
    aliases: Mapping[str, Iterable[str]] | None = None,
) -> list[GeneratedOption]:
    """The options :func:`spec_options` adds for ``spec`` (also what the consistency test checks)."""
    names, parse, helps = dict(names or {}), dict(parse or {}), dict(helps or {})
    more = {field: tuple(spellings) for field, spellings in (aliases or {}).items()}
    excluded, overrides = set(exclude), set(optional)
    hints = typing.get_type_hints(spec)
    known = {f.name for f in dataclasses.fields(spec)}  # type: ignore[arg-type]
    chosen = known if only is None else set(only)
    for extra in (set(names) | set(parse) | set(helps) | set(more) | excluded | chosen | overrides) - known:
        raise TypeError(f"{spec.__name__} has no field {extra!r} (spec_options)")
    options = []
    for f in dataclasses.fields(spec):  # type: ignore[arg-type]
        if f.name in excluded or f.name not in chosen or not f.init:
            continue
        parser = parse.get(f.name)
        if parser is None and not _is_scalar(hints[f.name]):
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.default is dataclasses.MISSING and not required and parser is None:
            raise TypeError(f"{spec.__name__}.{f.name} has a default_factory; give it a parse function or exclude it")
        is_optional = f.name in overrides and not required
        options.append(GeneratedOption(
            field=f.name, flag=names.get(f.name, _flag(f.name)), param=f"{into}__{f.name}",
            default=None if parser is not None or required or is_optional else f.default,
            help=_for_users(helps.get(f.name, f.metadata.get("doc", ""))),
            parse=parser, required=required, optional=is_optional, custom_help=f.name in helps,
            finite=bool(f.metadata.get("finite")), aliases=more.get(f.name, ()),
        ))
    return options


def _for_users(doc: str) -> str:
    """A field's doc as flag help: the doc speaks Python ('None = the model's length', 'None: no cap'), a flag user
    never types None — for them it is the flag not given."""
    return re.sub(r"\bNone\b", "not given", re.sub(r"\bNone(?: =|:)\s*", "not given: ", doc))


def _metavar(name: str, tp: Any) -> str | None:
    """The value placeholder of a flag read by a ``parse`` function (typer shows every such flag as ``<str>``):
    what the field holds — a size with units, seconds, a number, a comma list; None keeps typer's."""
    arms = [a for a in get_args(tp) if a is not type(None)] if get_origin(tp) in (Union, types.UnionType) else [tp]
    base = arms[0] if len(arms) == 1 else None
    if get_origin(base) in (tuple, list):
        return "<list>"
    if base is int:
        return "<size>" if name.endswith("_bytes") else "<int>"
    if base is float:
        return "<seconds>" if name.endswith("_s") else "<float>"
    if get_origin(base) is Literal:  # the choices the field holds (the parser may take other spellings of them)
        return "<" + "|".join(map(str, get_args(base))) + ">"
    return None


def field_flags(spec: type[Spec], names: Mapping[str, str] | None = None,
                values: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Field name → the flag that sets it (``names`` as given to :func:`spec_options`; a bool's ``--x/--no-x`` is
    ``--x``, or ``--no-x`` where ``values`` — the fields as given — has it False: the flag the user typed): what
    :func:`in_flag_words` puts in a spec's error message."""
    names, values = names or {}, values or {}

    def flag(f: dataclasses.Field[Any]) -> str:
        name = names.get(f.name, _flag(f.name))
        if values.get(f.name) is False and f.type in (bool, "bool"):
            return "--no-" + name.split("/")[0].removeprefix("--")
        return name.split("/")[0]

    return {f.name: flag(f) for f in dataclasses.fields(spec)}  # type: ignore[arg-type]


def in_flag_words(message: str, flags: Mapping[str, str]) -> str:
    """A spec's ValueError in the words of the command line: ``timeout_s=inf is out of range`` → ``--timeout inf is
    out of range``, ``sweep_rates[1]=2.0 repeats sweep_rates[0]=2.0`` → ``--sweep-rates item 2 = 2.0 repeats
    --sweep-rates item 1 = 2.0``, ``model is empty`` → ``--model is empty``. A field name is replaced where it
    names the field — before ``=`` or ``[i]``, opening the message, or spelled with an underscore — so a field
    called ``model`` or ``seed`` inside a sentence stays an English word."""
    if not flags:
        return message
    fields = "|".join(re.escape(f) for f in sorted(flags, key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w-])({fields})(?![\w-])(?:\[(\d+)\])?(=?)")

    def flag(m: re.Match[str]) -> str:
        field, index, eq = m.group(1), m.group(2), m.group(3)
        if not (eq or index is not None or "_" in field or m.start() == 0):
            return m.group(0)
        text = flags[field] + (f" item {int(index) + 1}" if index is not None else "")
        return text + ((" = " if index is not None else " ") if eq else "")

    # the user's own values, quoted in the message ('ftp://h/?model=x'), are theirs: only the text between them
    parts = re.split(r"('[^']*'|\"[^\"]*\")", message)
    text = "".join(part if i % 2 else pattern.sub(flag, part) for i, part in enumerate(parts))
    # a message for Python callers that names the flag beside its field ("lower max_model_len (--max-model-len)")
    # said the flag twice
    return re.sub(r"(--[\w-]+) \(\1\)", r"\1", text)


def float_reader(field: str, lo: float | None, hi: float | None, default: Any) -> Callable[[Any], float]:
    """A float flag's reader: its bounds checked as typer checks them (the same words, ``Input should be less than
    or equal to 1``), but NaN named first — it compares false with every bound, so typer said ``--max-accuracy-drop
    nan`` should be ``less than or equal to 1`` (and took it where the flag has no bounds)."""
    from pydantic import Field, TypeAdapter, ValidationError

    bounds = {k: v for k, v in (("ge", lo), ("le", hi)) if v is not None}
    span = f" from {_num(lo)} to {_num(hi)}" if lo is not None and hi is not None else (
        f" ≥ {_num(lo)}" if lo is not None else f" ≤ {_num(hi)}" if hi is not None else "")

    @functools.cache  # built when the flag is given: every command's options are declared at each start
    def adapter() -> TypeAdapter[float]:
        return TypeAdapter(typing.Annotated[float, Field(**bounds)] if bounds else float)

    def read(text: Any) -> float:
        if isinstance(text, float):  # the default, already a number
            return text
        try:
            value = adapter().validate_python(text)
        except ValidationError as exc:
            nan = isinstance(text, str) and text.strip().lower().lstrip("+-") == "nan"
            if not nan:  # typer's own words for a bound or a word that is not a number
                raise ValueError(exc.errors()[0]["msg"]) from None
            value = math.nan
        if math.isnan(value):
            fix = finite_fix(field, default).replace(" such as ", f"{span} such as ", 1)
            raise ValueError(f"{str(text).strip()!r} is not a number (NaN); give {fix}")
        return value

    return read


def _parameter(spec: type[Spec], opt: GeneratedOption) -> inspect.Parameter:
    f = next(x for x in dataclasses.fields(spec) if x.name == opt.field)  # type: ignore[arg-type]
    tp = typing.get_type_hints(spec)[opt.field]
    decls = [opt.flag]
    kwargs: dict[str, Any] = {"help": opt.help}
    if opt.parse is not None:
        if (metavar := _metavar(opt.field, tp)) is not None:
            kwargs["metavar"] = metavar
        tp = str | None
    else:
        if f.metadata.get("min") is not None:
            kwargs["min"] = f.metadata["min"]
        if f.metadata.get("max") is not None:
            kwargs["max"] = f.metadata["max"]
        if tp is float or (get_origin(tp) in (Union, types.UnionType) and float in get_args(tp)
                           and set(get_args(tp)) <= {float, type(None)}):
            kwargs["parser"] = float_reader(opt.field, f.metadata.get("min"), f.metadata.get("max"),
                                             None if f.default is dataclasses.MISSING else f.default)
        if (tp is bool or set(typing.get_args(tp)) == {bool, type(None)}) and "/" not in opt.flag:  # bool | None too
            decls = [f"{opt.flag}/--no-{opt.flag.removeprefix('--')}"]
    decls += opt.aliases
    option = typer.Option(... if opt.required else opt.default, *decls, **kwargs)
    if opt.default is None and not opt.required and get_origin(tp) not in (Union, types.UnionType):
        tp = tp | None  # the flag is optional: typer reads `str | None` as "no value given"
    return inspect.Parameter(opt.param, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=tp)


def _num(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def refuse_infinite(flag: str, value: Any, field: str, *, default: Any = None, text: str | None = None) -> None:
    """The usage error for a float flag given inf or -inf (or a number past ±1.8e308, which reads as inf) where the
    field has no meaning for it: one line naming the value (``text`` as typed, where the command has it) and what to
    give instead. Anything else passes."""
    if isinstance(value, float) and math.isinf(value):
        shown = text.strip() if text is not None else f"{value:g}"
        raise UserError(f"{flag} {shown} is not a finite number; give {finite_fix(field, default)}")


def _default(spec: type[Spec], field: str) -> Any:
    """The spec's own default of ``field`` (None when it has none): the example of a non-finite value's error."""
    f = next(x for x in dataclasses.fields(spec) if x.name == field)  # type: ignore[arg-type]
    return None if f.default is dataclasses.MISSING else f.default


def _parsed(spec: type[Spec], opt: GeneratedOption, text: str) -> Any:
    """``opt.parse(text)``, with its ValueError and the field's bounds turned into a usage error naming the flag."""
    flag = opt.flag.split("/")[0]
    try:
        value = opt.parse(text)  # type: ignore[misc]
    except UserError:
        raise
    except (ValueError, OverflowError) as exc:
        raise UserError(str(exc) if flag in str(exc) else f"{flag} {text!r} is not valid: {exc}") from exc
    f = next(x for x in dataclasses.fields(spec) if x.name == opt.field)  # type: ignore[arg-type]
    lo, hi = f.metadata.get("min"), f.metadata.get("max")
    if isinstance(value, float) and math.isnan(value):  # compares false with any bound: name it here
        raise UserError(f"{flag} {text!r} is not a number; give one such as 0.5")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if lo is not None and value < lo:
            raise UserError(f"{flag} {text!r} is out of range; the least is {_num(lo)}")
        if hi is not None and value > hi:
            raise UserError(f"{flag} {text!r} is out of range; the most is {_num(hi)}")
    if opt.finite:  # after the bounds: a bounded field keeps its range message
        refuse_infinite(flag, value, opt.field, default=_default(spec, opt.field), text=text)
    return value


def spec_options(
    spec: type[Spec], *, into: str, exclude: Iterable[str] = (), names: Mapping[str, str] | None = None,
    parse: Mapping[str, Callable[[str], Any]] | None = None, helps: Mapping[str, str] | None = None,
    only: Iterable[str] | None = None, optional: Iterable[str] = (),
    aliases: Mapping[str, Iterable[str]] | None = None,
) -> Callable[[F], F]:
    """Add one option per scalar field of ``spec`` to a typer command; it receives them as the dict ``into``.

    ``exclude``: fields the command fills itself; ``only``: generate just these fields; ``names``: flag spellings
    other than ``--field-name`` (a bool field gets ``--x/--no-x`` unless its name already holds a ``/``);
    ``parse``: text → value for fields whose flag uses another notation; ``helps``: help text other than the
    field's doc; ``optional``: fields whose flag defaults to None and, when not given, is left out of the dict
    (an override of a value that comes from elsewhere, e.g. a file), keeping its type and bounds; ``aliases``: further
    spellings of a field's flag, each a click declaration (``"--enable-prefix-caching/--no-enable-prefix-caching"``
    for a bool, ``"-tp"``), for users of another tool's names — errors still name the primary flag. A float field
    declared finite refuses inf as its flag's usage error, naming the value.
    """
    options = generated_options(spec, into=into, exclude=exclude, names=names, parse=parse, helps=helps, only=only,
                                optional=optional, aliases=aliases)

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        if into not in sig.parameters:
            raise TypeError(f"{fn.__name__} must take a keyword parameter {into!r} for the {spec.__name__} options")
        own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values() if p.name != into]
        generated = [_parameter(spec, o) for o in options]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values: dict[str, Any] = dict(kwargs.pop(into, None) or {})
            for o in options:
                value = kwargs.pop(o.param, o.default)
                if o.parse is not None or o.optional:
                    if value is None:
                        continue  # flag not given: the spec's own default applies
                    if o.parse is not None:
                        value = _parsed(spec, o, value)  # (refuses inf itself, naming the text as typed)
                if o.parse is None and o.finite:  # typer read the number: inf, or 1e400 read as inf
                    refuse_infinite(o.flag.split("/")[0], value, o.field, default=_default(spec, o.field))
                values[o.field] = value
            return fn(*args, **kwargs, **{into: values})

        params = own + generated
        # typer reads the signature (and get_type_hints of the function): both describe the generated options
        # options are keyword-only (typer passes every value by name), the required ones first: --help lists them
        # in this order, so `loadtest --help` starts with --base-url and --model, not --save
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                      and not isinstance(p.default, typer.models.OptionInfo)]
        keyword = [p.replace(kind=p.KEYWORD_ONLY) for p in params if p not in positional]
        keyword.sort(key=lambda p: p.default.default is not ... if isinstance(p.default, typer.models.OptionInfo)
                     else False)
        wrapper.__signature__ = sig.replace(parameters=positional + keyword)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        wrapper.spec_options = [*getattr(fn, "spec_options", []), (spec, options)]  # type: ignore[attr-defined]
        return typing.cast(F, wrapper)

    return decorate
