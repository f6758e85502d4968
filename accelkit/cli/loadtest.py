"""`accelkit loadtest`: load-test any OpenAI-compatible server, measuring as `vllm bench serve` does.
Thin: parse flags → ``accelkit.loadtest.run_loadtest`` → render (and store)."""

from __future__ import annotations

from collections import Counter
from typing import Any, NoReturn

import typer

from accelkit.bench.record import StoreWriter
from accelkit.cli.helptext import examples
from accelkit.cli.output import (
    JsonOption,
    Progress,
    ProgressOption,
    csv_list,
    emit,
    err,
    flag_values,
    fmt_num,
    out,
    table,
)
from accelkit.cli.spec_options import field_flags, spec_options
from accelkit.cli.store import open_for_saving, print_unsaved, print_unstored
from accelkit.core import AccelkitError, UserError
from accelkit.core.stats import min_samples_for
from accelkit.loadtest.config import SLO, LoadTestConfig, parse_rate
from accelkit.loadtest.datasets import parse_dataset
from accelkit.loadtest.structured import parse_constraint


def _floats(value: str, flag: str, *, rates: bool = False) -> tuple[float, ...]:
    items = csv_list(value, field=flag) or []
    if not items:
        raise UserError(f"{flag} {value!r} is empty; give a comma list, e.g. {'1,2,4,8' if rates else '50,90,99'}")
    if rates:
        return tuple(parse_rate(v, field=flag) for v in items)
    result = []
    for v in items:
        try:
            q = float(v)
        except ValueError:
            raise UserError(f"{flag} {v!r} is not a number; e.g. {flag} 50,90,99") from None
        if not 0 < q <= 100:
            raise UserError(f"{flag} {v} is out of range; each percentile must be in (0, 100]")
        result.append(q)
    return tuple(result)


def _dataset(text: str) -> str:
    parse_dataset(text)  # a bad --dataset is a usage error before anything is sent
    return text


def _slo(text: str) -> SLO:
    return SLO.parse(text)


#: LoadTestConfig fields spelled otherwise than --field-name
NAMES = {"timeout_s": "--timeout", "warmup_timeout_s": "--warmup-timeout", "ignore_eos": "--ignore-eos/--no-ignore-eos"}
#: every LoadTestConfig field's flag: the config's errors name fields (timeout_s=inf), the user typed flags
FLAGS = field_flags(LoadTestConfig, NAMES)


EXAMPLES = examples(
    "accelkit loadtest --base-url http://127.0.0.1:8000 --model tiny --request-rate 4 --num-prompts 200",
    "accelkit loadtest --base-url http://127.0.0.1:8000 --model tiny --sweep-rates 1,4,16 --random-input-len 128",
    "accelkit loadtest --base-url http://127.0.0.1:8000 --model tiny --slo ttft_ms=500,tpot_ms=50 --json",
)

@spec_options(
    LoadTestConfig, into="load", names=NAMES,
    parse={"request_rate": lambda text: parse_rate(text), "slo": _slo, "dataset": _dataset,
           "percentiles": lambda text: _floats(text, "--percentiles"),
           "sweep_rates": lambda text: _floats(text, "--sweep-rates", rates=True),
           "structured_outputs": lambda text: parse_constraint(text)},
    helps={"base_url": "Server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine; not the endpoint path).",
           "dataset": "random, sharegpt:PATH or jsonl:PATH (one {\"prompt\", \"output_len\"?} per line).",
           "request_rate": "Mean requests/s (gamma arrivals), or inf: all at once (default inf).",
           "slo": "Per-request SLOs for goodput, e.g. ttft_ms=200,tpot_ms=50,e2e_ms=5000.",
           "percentiles": "Percentiles to report (default 50,90,99).",
           "sweep_rates": "One pass per rate, e.g. 1,2,4,8,inf (replaces --request-rate).",
           "api_key": "Bearer token for the server (never stored).",
           "structured_outputs": "Constrain every output and count the valid ones: json:SCHEMA_FILE, regex:PATTERN, "
                                 "choice:A,B,C or json_object."},
)
def loadtest_cmd(
    save: bool = typer.Option(True, "--save/--no-save", help="Store the result in the results store."),
    as_json: bool = JsonOption,
    progress: bool | None = ProgressOption,
    *,
    load: dict[str, Any],
) -> None:
    """Load-test an OpenAI-compatible server: TTFT, TPOT, ITL, E2E, throughput and goodput per request rate (and,
    with --structured-outputs, the share of outputs that obey the constraint)."""
    with flag_values(FLAGS):
        config = LoadTestConfig(**load)
    store = open_for_saving(save)  # before sending: an unwritable store fails now, not after the test
    writer = StoreWriter(store)
    later: list[str] = []  # the run's warnings (HTTP 429s): printed after the tables, where they are read

    def notice(line: str) -> None:
        if line.startswith("warning:"):
            later.append(line)
        else:
            err.print(line, highlight=False, markup=False, soft_wrap=True)

    try:
        result, received = _measure(config, progress, notice, save=save)
        result_id = writer.add(result)
    finally:
        if store is not None:
            store.close()
    data = {**result.to_dict(), "result_id": result_id}
    interrupted = result.details.get("interrupted", False)
    if writer.error is not None:  # the same document, with why it was not stored: printed rather than lost
        if interrupted:
            print_unsaved({**data, "result_id": None, "store_error": writer.error}, AccelkitError(writer.error),
                          interrupted="not finished: " + ", ".join(result.details["unfinished"]), importable=True)
        print_unstored(data, writer.error, importable=True)
    emit(data, as_json, lambda: _render(result.details, result_id))
    _print_warnings(result.details, result.details["passes"])  # with --json too: stderr, never in the document
    if as_json:  # the table view lists the failed requests; --json alone said nothing of them on stderr
        _print_failed(result.details["passes"])
    for line in later:
        err.print(line, highlight=False, markup=False, soft_wrap=True)
    if interrupted:
        _exit_interrupted(result, result_id, received, save=save)


def _measure(config: LoadTestConfig, progress: bool | None, notice: Any, *, save: bool) -> tuple[Any, list[str]]:
    """The run, and the signal that stopped it (``["SIGTERM"]``; empty for Ctrl-C or none). An interrupt after a pass
    finished returns the finished passes (``details.interrupted``); before any, it exits 130 (143 for SIGTERM)."""
    from accelkit.cli.bench import exit_stopped, sigterm_as_interrupt  # lazy, as the command's other heavy imports
    from accelkit.loadtest.runner import LoadTestInterrupted, run_loadtest  # lazy: the runner imports httpx

    with sigterm_as_interrupt() as received:  # SIGTERM stops it as Ctrl-C does, instead of silently
        try:
            with Progress("load test", show=progress) as bar:
                result = run_loadtest(config, on_progress=lambda text: bar.update(text, step=text.split(":")[0]),
                                      on_notice=notice)
        except LoadTestInterrupted as exc:
            return exc.result, list(received)
        except KeyboardInterrupt:  # no pass finished: nothing to keep
            exit_stopped("SIGTERM" in received,
                         "the load test did not finish; nothing was stored" + ("" if save else " (--no-save)"))
    return result, list(received)


def _exit_interrupted(result: Any, result_id: int | None, received: list[str], *, save: bool) -> NoReturn:
    """After the document: what an interrupt kept (the finished passes) and what it did not, exit 130 (143)."""
    from accelkit.cli.bench import exit_stopped  # lazy, as the command's other heavy imports
    kept = ", ".join(f"rate {_rate(p['rate'])}" for p in result.details["passes"])
    where = f"result {result_id}" if result_id is not None else "not stored: --no-save" if not save else "not stored"
    exit_stopped("SIGTERM" in received, f"kept the finished pass(es) {kept} ({where}); not finished: "
                                        f"{', '.join(result.details['unfinished'])}")


def _ms(value: float | None) -> str | None:
    return fmt_num(value, 2)


def _rate(rate: float | str) -> str:
    return rate if isinstance(rate, str) else f"{rate:g}"


def _pct(dist: dict[str, Any], key: str, starred: set[str]) -> str | None:
    """A percentile in ms, with a star when too few samples back it (the key is added to ``starred``)."""
    text = _ms(dist[key])
    if text is not None and key in dist.get("unbacked", ()):
        starred.add(key)
        return text + "*"
    return text


def _unbacked_note(starred: set[str]) -> str:
    """The footnote for the stars: what each starred percentile needs (as `accelkit bench` prints it)."""
    needs = []
    for key in sorted(starred, key=lambda k: float(k[1:])):
        need = min_samples_for(float(key[1:]))
        needs.append(f"{key} needs ≥ {need} samples" if need is not None else f"{key} (the maximum) is never backed")
    return "* not backed: " + ", ".join(needs) + " (LoadGen rule, 99% confidence)"


def _share(share: float | None) -> str | None:
    return None if share is None else f"{share * 100:.1f}%"


def _validity_rows(v: dict[str, Any] | None) -> list[tuple[Any, ...]]:
    """The structured-output rows of the single-pass table (none without a constraint)."""
    if v is None:
        return []
    return [("outputs checked", v["checked"], "requests"), ("valid outputs", v["valid"], "requests"),
            ("invalid outputs", v["invalid"], "requests"), ("truncated by max_tokens", v["truncated"], "requests"),
            ("valid share", _share(v["valid_share"]), "")]


def _print_structured(structured: dict[str, Any], passes: list[dict[str, Any]]) -> None:
    """What was asked for and the first invalid outputs (the warning for outputs max_tokens cut: _print_warnings)."""
    out.print(f"structured outputs: {structured['constraint']}, sent as {structured['sent_as']}; valid share = valid "
              "/ checked, outputs cut by max_tokens (truncated) included", highlight=False, markup=False, soft_wrap=True)
    examples = [(_rate(p["rate"]), e["index"], e["reason"], e["text"]) for p in passes
                for e in (p.get("structured_outputs") or {}).get("invalid_examples", [])]
    if examples:
        out.print(table("Invalid outputs (first of each pass)", ["rate", "request", "why", "output (start)"], examples,
                        right=(1,)))


def _render(d: dict[str, Any], result_id: int | None) -> None:
    qs = list(dict.fromkeys(f"p{q:g}" for q in d["percentiles"]))  # --percentiles 50,50: one column, not two
    passes = d["passes"]
    starred: set[str] = set()
    if len(passes) == 1:
        _render_pass(d, passes[0], qs, starred)
    structured = d.get("structured_outputs")  # absent from results stored before structured outputs
    if len(passes) > 1:
        _render_curve(d, passes, starred, structured=bool(structured))
        _render_curve_percentiles(d, passes, qs, starred)
    if structured:
        _print_structured(structured, passes)
    if starred:
        out.print(_unbacked_note(starred), highlight=False, markup=False, soft_wrap=True)
    failures = [(_rate(p["rate"]), f["count"], f["error"]) for p in passes for f in p["failures"]]
    if failures:
        out.print(table("Failed requests", ["rate", "count", "error"], failures, right=(1,)))
    if d["slo"] and any(v is not None for v in d["slo"].values()):
        out.print(f"goodput: {d['goodput_definition']}; SLOs " +
                  ", ".join(f"{k}<={v:g}" for k, v in d["slo"].items() if v is not None))
    if result_id is not None:
        err.print(f"stored as result {result_id}")


def _render_pass(d: dict[str, Any], p: dict[str, Any], qs: list[str], starred: set[str]) -> None:
    """One pass: its metrics, latency distributions and the lengths actually sent (``starred``: the percentiles
    shown that too few samples back)."""
    rows: list[tuple[Any, ...]] = [
        ("successful requests", p["completed"], "requests"), ("failed requests", p["failed"], "requests"),
        ("duration", fmt_num(p["duration_s"], 2), "s"),
        ("total input tokens", p["total_input_tokens"], "tokens"),
        ("total generated tokens", p["total_output_tokens"], "tokens"),
        ("request throughput", fmt_num(p["request_throughput"], 2), "req/s"),
        ("output token throughput", fmt_num(p["output_throughput"], 2), "tokens/s"),
        ("total token throughput", fmt_num(p["total_token_throughput"], 2), "tokens/s"),
        ("goodput (per request)", fmt_num(p["goodput"], 2), "req/s"),
        ("peak concurrency", p["peak_concurrency"], "requests"),
        *_validity_rows(p.get("structured_outputs")),
    ]
    out.print(table(f"Load test — {d['config']['model']} via {d['url']} · {d['arrivals']['per_rate'][0]}"
                    f" · ignore_eos={d['ignore_eos']}", ["metric", "value", "unit"], rows, right=(1,)))
    lat = [(name, p[key]["n"], _ms(p[key]["mean"]), _ms(p[key]["median"]), _ms(p[key]["std"]),
            *(_pct(p[key], q, starred) for q in qs))
           for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms"))]
    out.print(table("Latency (ms)", ["", "n", "mean", "median", "std", *qs], lat, right=tuple(range(1, 5 + len(qs)))))
    lengths = p["lengths"]
    len_rows = [(name, fmt_num(lengths[key]["mean"], 1), *(fmt_num(lengths[key][q], 0) for q in qs))
                for name, key in (("prompt tokens (usage)", "prompt_tokens"), ("completion tokens", "completion_tokens"),
                                  ("max_tokens sent", "max_tokens"))]
    out.print(table(f"Lengths actually sent — dataset {d['dataset']['dataset']}", ["", "mean", *qs], len_rows,
                    right=tuple(range(1, 2 + len(qs)))))


def _render_curve(d: dict[str, Any], passes: list[dict[str, Any]], starred: set[str], *, structured: bool) -> None:
    """Several rates: one row per pass, the latency-throughput curve."""
    rows = [(_rate(pt["rate"]), pt["completed"], pt["failed"], fmt_num(pt["request_throughput"], 2),
             fmt_num(pt["output_throughput"], 1), fmt_num(pt["goodput"], 2),
             _pct(p["ttft_ms"], "p50", starred), _pct(p["ttft_ms"], "p99", starred),
             _pct(p["tpot_ms"], "p50", starred), _pct(p["tpot_ms"], "p99", starred), _pct(p["e2e_ms"], "p50", starred),
             *([_share(pt.get("valid_share"))] if structured else []))
            for pt, p in zip(d["curve"], passes, strict=True)]
    headers = ["rate req/s", "ok", "failed", "req/s", "out tok/s", "goodput req/s", "TTFT p50 ms", "TTFT p99 ms",
               "TPOT p50 ms", "TPOT p99 ms", "E2E p50 ms", *(["valid"] if structured else [])]
    out.print(table(f"Latency-throughput curve — {d['config']['model']} via {d['url']} · ignore_eos={d['ignore_eos']}",
                    headers, rows, right=tuple(range(0, len(headers)))))


def _render_curve_percentiles(d: dict[str, Any], passes: list[dict[str, Any]], qs: list[str], starred: set[str]) -> None:
    """A sweep's --percentiles: the curve's columns are fixed (p50, p99), so percentiles asked for beyond the default
    50,90,99 were stored but never shown; they get a table of their own, a row per rate and metric."""
    if sorted(float(q) for q in d["percentiles"]) == [50.0, 90.0, 99.0]:
        return
    rows = [(_rate(p["rate"]), name, p[key]["n"], *(_pct(p[key], q, starred) for q in qs))
            for p in passes
            for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms"))]
    out.print(table("Latency (ms) per rate, --percentiles", ["rate req/s", "", "n", *qs], rows,
                    right=(0, *range(2, 3 + len(qs)))))


def _print_failed(passes: list[dict[str, Any]]) -> None:
    """With --json: how many requests failed (HTTP 429s aside, which have their own warning) and why, on stderr —
    a run whose server died half-way otherwise exited 0 with nothing said, its throughput counting the survivors."""
    errors: Counter[str] = Counter()
    for p in passes:
        errors.update({f["error"]: f["count"] for f in p["failures"] if not f["error"].startswith("HTTP 429")})
    failed = sum(errors.values())
    if not failed:
        return
    total = sum(p["num_requests"] for p in passes)
    said = "; ".join(f"{n} × {text!r}" for text, n in errors.most_common(3)) + ("; …" if len(errors) > 3 else "")
    err.print(f"warning: {failed} of {total} requests failed and count in no latency or throughput: {said} "
              "(details.passes[].failures)", highlight=False, markup=False, soft_wrap=True)


def _print_warnings(d: dict[str, Any], passes: list[dict[str, Any]]) -> None:
    """On stderr, with --json as without (they were printed by the table view only, so a --json run dropped them):
    token counts without usage, a warm-up that timed out, prompts a prefix cache may serve, structured outputs cut
    by max_tokens."""
    missing = sum(p["lengths"]["requests_without_usage"] for p in passes)
    if missing:
        err.print(f"warning: {missing} requests came without usage; their token counts are chunk counts")
    warmup = d["warmup"]
    if warmup.get("timed_out"):
        n = warmup["requests"]
        err.print(f"warning: the warm-up timed out after {warmup['duration_s']:.1f} s (--warmup-timeout "
                  f"{d['config']['warmup_timeout_s']:g}), {n} warm-up request{'s' if n != 1 else ''} cancelled: the "
                  "server may still have been cold for the first measured requests", highlight=False, markup=False,
                  soft_wrap=True)
    sweep_prompts = d["dataset"].get("sweep_prompts", "")
    if "prefix cache" in sweep_prompts:
        err.print(f"warning: --dataset {d['dataset']['dataset']} sends {sweep_prompts} (--dataset random draws "
                  "fresh prompts for each pass)", highlight=False, markup=False, soft_wrap=True)
    truncated = sum((p.get("structured_outputs") or {}).get("truncated", 0) for p in passes)
    if truncated:
        err.print(f"warning: {truncated} outputs were cut by max_tokens (finish_reason length) before their match "
                  "ended and count as not valid; raise --random-output-len (or the dataset's output_len)",
                  highlight=False, markup=False, soft_wrap=True)
