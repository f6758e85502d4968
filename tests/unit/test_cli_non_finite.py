"""A float flag given inf, -inf or a number past ±1.8e308 (which reads as inf) is refused in one line naming the value
and the fix, exit 2, where infinity means nothing: `plan --target-tokens-per-s inf` searched 65,536 devices and
exited 0 with a warning, `bench llm-train --lr inf` trained at lr=inf. Where it means something it still works:
`loadtest --request-rate inf` sends every request at once (as `vllm bench serve`). A sweep file's numbers follow the
same rule (YAML reads `.inf` as infinity); only its request rates take inf."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import typer
from typer.testing import CliRunner

from accelkit.cli.spec_options import spec_options
from accelkit.core import UserError
from accelkit.core.spec import Spec, spec_field
from tests.unit.cli_refusal_util import one_error

PLAN = ("plan", "--model", "llama-3.1-8b", "--hardware", "h100")


@pytest.mark.parametrize(("args", "expected"), [
    # the reported case: exit 0 and "no device count up to --max-devices 65536 reaches --target-tokens-per-s inf"
    ((*PLAN, "--target-tokens-per-s", "inf"),
     "error: --target-tokens-per-s inf is not a finite number; give a throughput in tokens/s such as 2e6"),
    # 1e400 overflows to inf as it is read; the message names the number read
    ((*PLAN, "--target-tokens-per-s", "1e400"),
     "error: --target-tokens-per-s inf is not a finite number; give a throughput in tokens/s such as 2e6"),
    # bounded: a finite 1e300 Gb/s overflowed to inf bytes/s, which the cluster refused as an internal error
    ((*PLAN, "--scaleout-gbps", "Infinity"),
     "error: Invalid value for '--scaleout-gbps': Input should be less than or equal to 10000000 (got 'Infinity')"),
    ((*PLAN, "--scaleout-gbps", "1e300"),
     "error: Invalid value for '--scaleout-gbps': Input should be less than or equal to 10000000 (got '1e300')"),
    ((*PLAN, "--task", "infer", "--max-decode-latency-s", "inf"),
     "error: --max-decode-latency-s inf is not a finite number; give seconds such as 0.05"),
    # refused for what it is, before the check that --budget-per-hour needs --compare-basis budget
    ((*PLAN, "--budget-per-hour", "inf"),
     "error: --budget-per-hour inf is not a finite number; give dollars per hour such as 100"),
    # (--model nope-model: without the refusal, the command fails on the model instead of training at lr=inf)
    (("bench", "llm-train", "--model", "nope-model", "--lr", "inf"),
     "error: --lr inf is not a finite number; give a learning rate such as 0.0001"),
    (("bench", "resnet", "--powersgd-min-compression-rate", "inf"),
     "error: --powersgd-min-compression-rate inf is not a finite number; give a number such as 2"),
    # tune's --lr is declared by hand (typer's float takes inf); --size huge fails next if it is let through
    (("tune", "bert", "--size", "huge", "--lr", "inf"),
     "error: --lr inf is not a finite number; give a learning rate such as 1e-3"),
])
def test_an_infinite_float_flag_is_one_line_naming_it(cli, args, expected):
    assert one_error(cli(*args)) == expected


def test_a_range_error_keeps_its_words(cli):
    """A bounded flag's inf is out of its range, said as before (`--warmup-time 'inf' is out of range`)."""
    assert one_error(cli("bench", "bert", "--warmup-time", "inf")) == \
        "error: --warmup-time 'inf' is out of range; the most is 86400"


def test_request_rate_inf_still_sends_everything_at_once(cli):
    """`--request-rate inf` is a rate (vLLM's default): taken, and the run goes on to the server (none listens on
    port 9: the run fails there, exit 1, not on the flag)."""
    proc = cli("loadtest", "--base-url", "http://127.0.0.1:9", "--model", "m", "--num-prompts", "1", "--warmup", "0",
               "--no-save", "--request-rate", "inf")
    assert proc.returncode == 1, proc.stderr
    assert "no request to http://127.0.0.1:9" in proc.stderr and "finite" not in proc.stderr


def test_spec_options_refuse_inf_unless_the_field_takes_it():
    """The rule in ``spec_options`` itself: typer-read and ``parse``-read flags of fields declared finite refuse inf
    after their bounds (a bounded flag keeps its range message; a parsed one is named as typed), and a field not
    declared finite passes it on."""

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Demo(Spec):
        target_tokens_per_s: float | None = spec_field(
            None, finite=True, doc="Typer reads it (no bounds: -inf reaches the rule).")
        timeout_s: float = spec_field(10.0, min=0.0, finite=True, doc="Read by a parse function.")
        cap_s: float = spec_field(1.0, min=0.0, max=5.0, finite=True, doc="Bounded, read by a parse function.")
        rate: float = spec_field(math.inf, min=0.0, doc="inf means something here.")

    seen: dict = {}
    app = typer.Typer()

    @app.command()
    @spec_options(Demo, into="demo", parse={"timeout_s": float, "cap_s": float})
    def cmd(*, demo: dict) -> None:
        seen.update(demo)

    runner = CliRunner()

    def error(*args: str) -> str:
        result = runner.invoke(app, list(args))
        assert isinstance(result.exception, UserError), result.output
        return str(result.exception)

    assert error("--target-tokens-per-s", "-inf") == \
        "--target-tokens-per-s -inf is not a finite number; give a throughput in tokens/s such as 2e6"
    assert error("--timeout-s", "1e400") == "--timeout-s 1e400 is not a finite number; give seconds such as 10"
    assert error("--cap-s", "1e400") == "--cap-s '1e400' is out of range; the most is 5"
    assert runner.invoke(app, ["--rate", "inf", "--target-tokens-per-s", "2e6"]).exit_code == 0
    assert seen["rate"] == math.inf and seen["target_tokens_per_s"] == 2e6


def test_a_sweep_file_number_is_finite(cli, tmp_path):
    """`workloads: {llm-train: {lr: .inf}}` ran its point at lr=inf, as the flag did."""
    path = tmp_path / "sweep.yaml"
    path.write_text("name: s\nkind: bench\nworkloads: {llm-train: {model: tiny-llama, lr: .inf}}\n")
    # (the workload's config refuses it as the file is read: LLMTrainConfig's lr is finite, its default the example)
    assert one_error(cli("sweep", str(path))) == \
        f"error: {path}: workloads['llm-train']: lr=inf is not a finite number; expected a learning rate such as 0.0001"
    # (YAML 1.1 reads a number past 1.8e308 as inf when it is written as a float: 1.0e+400)
    path.write_text("name: s\nkind: bench\nworkloads: {llm-train: {model: tiny-llama}}\n"
                    "resources: {num_cpus: 1.0e+400}\n")
    assert one_error(cli("sweep", str(path))) == \
        f"error: {path}: resources.num_cpus=inf is not a finite number; give a number such as 1"


def test_a_sweep_file_rate_may_be_inf(tmp_path):
    """A loadtest sweep's rates (and a loadtest's sweep_rates) take inf: every request at once."""
    from accelkit.cli.sweep import _refuse_infinite
    from accelkit.sweep import load_sweep

    path = tmp_path / "sweep.yaml"
    path.write_text("name: s\nkind: loadtest\nworkloads: {m: {}}\nrates: [1, .inf]\n"
                    "loadtest: {base_url: 'http://127.0.0.1:9', sweep_rates: [2, .inf], timeout_s: 30.0}\n")
    spec = load_sweep(path)
    assert math.inf in spec.rates and math.inf in spec.loadtest["sweep_rates"]
    _refuse_infinite(path, spec)  # nothing refused


def test_a_size_past_any_float_is_a_usage_error(cli):
    """400 digits of bytes read as inf, and int(inf) raised OverflowError: `hw probe --max-message-size` reported it
    as an internal error (exit 1), the other size flags as "cannot convert float infinity to integer"."""
    digits = "9" * 400
    assert one_error(cli("hw", "probe", "--collectives", "--device", "cpu", "--max-message-size", digits)) == \
        f"error: --max-message-size {digits!r} is past any size (more than 1.8e308 bytes); write e.g. 512MiB, " \
        "16GiB or 80GB"
    assert "is past any size" in one_error(cli(*PLAN, "--task", "infer", "--kv-cache-memory", digits + "GiB"))
