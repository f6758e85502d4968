"""`accelkit bench` is one subcommand per workload; each one's options are its config's fields (generated, so
their defaults and help cannot drift) and nothing that does not apply to it."""

from __future__ import annotations

import dataclasses

import typer

from accelkit.bench.workloads import WORKLOADS
from accelkit.cli.app import app
from accelkit.cli.spec_options import _for_users, _is_scalar


def _bench_commands():
    root = typer.main.get_command(app)
    return root.commands["bench"].commands


def _flags(cmd) -> set[str]:
    return {opt for p in cmd.params for opt in (*p.opts, *getattr(p, "secondary_opts", ()))}


def test_every_workload_is_a_subcommand_with_its_config_fields():
    import typing

    commands = _bench_commands()
    assert set(commands) == {*WORKLOADS, "suite"}
    for name, cls in WORKLOADS.items():
        params = {p.name: p for p in commands[name].params}
        hints = typing.get_type_hints(cls.config_cls)
        for f in dataclasses.fields(cls.config_cls):
            param = params.get(f"workload__{f.name}") or params.get(f.name)
            assert param is not None, (name, f.name)
            if param.name.startswith("workload__") and _is_scalar(hints[f.name]):
                assert param.default == f.default and param.help == _for_users(f.metadata["doc"]), (name, f.name)


def test_help_shows_only_what_applies():
    commands = _bench_commands()
    assert "--prompt-len" in _flags(commands["llm"]) and "--prompt-len" not in _flags(commands["bert"])
    assert "--recompute" in _flags(commands["llm-train"]) and "--recompute" not in _flags(commands["bert"])
    assert "--channels-last" in _flags(commands["resnet"]) and "--channels-last" not in _flags(commands["llm-train"])
    assert "--fp8-scaling" in _flags(commands["llm-train"]) and "--fp8-scaling" not in _flags(commands["llm"])
    assert "--nproc-per-node" in _flags(commands["resnet"]) and "--nproc-per-node" not in _flags(commands["bert"])
    assert "--precision" not in _flags(commands["dataloader"]) and "--num-workers" in _flags(commands["dataloader"])
    for cmd in commands.values():  # every run takes the loop and the bench config
        assert {"--warmup", "--min-time", "--device", "--no-accuracy", "--progress", "--json"} <= _flags(cmd)


def test_launch_flags_on_one_process_are_refused_and_ranks_need_cores():
    """--rdzv-id, --max-restarts, --node-rank … on one process on one node would start torchrun for nothing: one
    line naming them; more CPU ranks than cores is refused before torchrun starts."""
    import pytest

    from accelkit.bench.runner import BenchConfig
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.cli.bench import _dist_config
    from accelkit.core import UserError
    from accelkit.distributed.bench_launch import run_distributed_bench
    from accelkit.distributed.launch import DistConfig

    assert _dist_config(DistConfig().to_dict()) is None
    assert _dist_config({**DistConfig().to_dict(), "nproc_per_node": 2}) == DistConfig(nproc_per_node=2)
    with pytest.raises(UserError, match="--rdzv-id, --max-restarts set up a torchrun launch, but this run is one proc"):
        _dist_config({**DistConfig().to_dict(), "rdzv_id": "job", "max_restarts": 3})
    with pytest.raises(UserError, match="--nproc-per-node 100000 exceeds the .* CPU cores"):
        run_distributed_bench(make_workload("resnet", {"size": "tiny"}), [Variant()], BenchConfig(device="cpu"),
                              DistConfig(nproc_per_node=100_000))


def _run_with_store_error(*, interrupted: bool):
    from accelkit.core import Recipe, summarize
    from accelkit.core.bench_result import BenchResult, BenchRunResult, Throughput

    def entry(name: str, result_id: int | None) -> BenchResult:
        return BenchResult(name=name, step="forward", precision=name, recipe=Recipe(),
                           latency_s=summarize([0.01, 0.011, 0.012]), throughput=Throughput(value=100.0),
                           result_id=result_id)

    return BenchRunResult(workload="bert", label="l", device="cpu", hardware="h", run_id="r", result_ids=[7],
                          variants=[entry("fp32", 7), entry("bf16", None)], interrupted=interrupted,
                          unfinished=["fp16"] if interrupted else [], store_error="database or disk is full")


def test_a_store_failure_after_some_variants_names_what_was_stored_and_an_interrupt_still_exits_130(capsys):
    """With fp32 stored (result 7) before the disk filled, the message said 'The measurement was not stored'; and a
    run interrupted by Ctrl-C whose store also failed exited 1, where a plain interrupt exits 130. It now names what
    was stored (result ids) and what not, and exits 130 when interrupted — after the JSON, in both cases."""
    import json

    import pytest

    from accelkit.cli.bench import _render
    from accelkit.core import AccelkitError

    with pytest.raises(AccelkitError) as failure:
        _render(_run_with_store_error(interrupted=False), as_json=True)
    message = str(failure.value)
    assert "The measurement was not stored" not in message
    assert "Stored before the failure: fp32 · forward (result 7); not stored: bf16 · forward" in message
    doc = json.loads(capsys.readouterr().out)
    assert [v["result_id"] for v in doc["variants"]] == [7, None]

    with pytest.raises(SystemExit) as interrupted:
        _render(_run_with_store_error(interrupted=True), as_json=True)
    assert interrupted.value.code == 130
    captured = capsys.readouterr()
    assert json.loads(captured.out)["interrupted"] is True
    assert "interrupted (not finished: fp16): database or disk is full" in captured.err
    assert "not stored: bf16 · forward" in captured.err


def test_a_powersgd_setting_without_powersgd_is_named_by_its_flag(capsys):
    """'powersgd_rank applies to grad_compressions with powersgd, not none' named the fields, not the flags; and a
    switch turned off was named by its positive flag (--powersgd-warm-start for --no-powersgd-warm-start)."""
    import pytest

    from accelkit.cli.app import main

    base = ["bench", "llm-train", "--model", "tiny-llama", "--device", "cpu", "--nproc-per-node", "2"]
    for flag, named in ((["--powersgd-rank", "8"], "--powersgd-rank 8"),
                        (["--no-powersgd-warm-start"], "--no-powersgd-warm-start"),
                        (["--no-powersgd-error-feedback"], "--no-powersgd-error-feedback")):
        with pytest.raises(SystemExit) as info:
            main([*base, *flag])
        assert info.value.code == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"error: {named} applies to --grad-compression powersgd, not none"]


def test_with_no_warm_up_a_decode_block_is_sized_from_one_step_of_its_first_call():
    """Decode's first call runs a prefill, a whole cycle and one more step (so a compiled decode meets every shape
    first); with --warmup 0 the whole first call sized the blocks as if it were one step — ~65× too long a step at
    the default 64 output tokens, blocks of a single call."""
    from accelkit.bench.reference import Reference
    from accelkit.bench.runner import BenchConfig, Reporter
    from accelkit.bench.session import Lane, Measurer
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.bench.workloads.base import Step
    from accelkit.timing import LoopConfig

    workload = make_workload("llm", {"model": "tiny-llama", "batch_size": 1, "prompt_len": 8, "output_len": 4})
    decode = next(s for s in workload.prepare(Variant(), "cpu", seed=0).steps if s.name == "decode")
    assert decode.first_call_calls == 5  # output_len + 1 steps after the prefill
    loop = LoopConfig(warmup_iterations=0, warmup_time_s=0.0)
    measurer = Measurer(workload, BenchConfig(device="cpu", loop=loop), "cpu", Reporter(), Reference())
    lane = Lane(variant=Variant(), step=Step("decode", lambda: None, 1, "tokens", first_call_calls=5), load_s=0.0,
                load_bytes=None, first_call_s=5.0)
    measurer._warm(lane)
    assert lane.warmup_iterations == 0 and lane.per_iteration_s == 1.0
