"""A suite says which workload each refusal is about, and honours a config's own loop.

`bench suite quick --precision int8,fp8 --no-progress` printed `refused fp8: …` five times and `refused int8: …`
three times with nothing naming the workload (with --no-progress, the only lines on stderr); and
`run_suite("quick", BenchConfig(loop=LoopConfig(...)))` ran the suite's own loop instead of the one given."""

from accelkit.bench.runner import BenchConfig, Reporter
from accelkit.bench.suite import quick, run_suite
from accelkit.timing import LoopConfig


class _Record(Reporter):
    """Keeps the refusals; stops the suite (Ctrl-C) once its second workload starts to build."""

    def __init__(self, stop_after_refusals: bool = False) -> None:
        self.stop_after_refusals = stop_after_refusals
        self.refusals: list[str] = []
        self.loops: list[LoopConfig] = []

    def refused(self, variant: str, reason: str) -> None:
        self.refusals.append(variant)

    def status(self, text: str) -> None:
        if self.stop_after_refusals and self.refusals:
            raise KeyboardInterrupt  # (Ctrl-C) the refusals are told before any model is built: no need to run one

    def progress(self, lane: str, iterations: int, measured_s: float, config: LoopConfig) -> None:
        self.loops.append(config)

    def note(self, text: str) -> None:
        if ": resnet-tiny-train — building" in text:
            raise KeyboardInterrupt


CONFIG = dict(device="cpu", save=False, predict=False, accuracy=False, auto_probe=False)
LOOP = LoopConfig(warmup_iterations=0, warmup_time_s=0, min_iterations=1, min_time_s=0, max_iterations=1)


def test_a_refusal_names_the_workload():
    reporter = _Record(stop_after_refusals=True)
    run_suite("quick", BenchConfig(**CONFIG), loop=LOOP, reporter=reporter, precisions=["fp32", "fp8"])
    assert reporter.refusals == ["fp8 in bert-tiny"]


def test_a_configs_own_loop_is_honoured():
    reporter = _Record()
    run_suite("quick", BenchConfig(**CONFIG, loop=LOOP), reporter=reporter, precisions=["fp32"])
    assert reporter.loops and all(loop == LOOP for loop in reporter.loops)
    assert quick().loop != LOOP  # (the suite alone would have run another loop)
