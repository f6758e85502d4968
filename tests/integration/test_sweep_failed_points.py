"""`accelkit sweep` on what `accelkit bench` would fail, refuse or flag:

* a point whose every variant raises at run time (a model whose forward raises; a CUDA OOM on a GPU) is an error
  with a 'sweep-error' row — it was "ok" with no results, so a sweep of only such points exited 0;
* a point with some variants measured and some raised stays ok, and carries (and prints) the failures;
* a mistake in the sweep file fails the load in one line (exit 2) instead of every point at run time;
* a plan point that does not fit in memory says so instead of reading as the fastest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelkit.core import UserError
from accelkit.sweep import SweepSpec, collect, expand, load_sweep, run_point
from tests.conftest import accelkit

torch = pytest.importorskip("torch")

LOOP = "loop: {warmup_iterations: 1, warmup_time_s: 0, min_iterations: 2, min_time_s: 0}\n"
#: by its path from the repository root: the CLI's pool worker imports it there (pytest's __name__ is the bare file)
DATASET = "tests.integration.test_sweep_failed_points:make_dataset"
RAISES = "tests.integration.test_sweep_failed_points:make_raising_model"
WIDE = {"COLUMNS": "250"}  # a table row on one line
BENCH = "bench: {device: cpu, predict: false, auto_probe: false, accuracy: false}\n"


class RaisesInADataLoaderWorker(torch.utils.data.Dataset):
    """Tiny tensors; reading one in a DataLoader worker process raises (the num_workers=0 variant is measured)."""

    def __len__(self):
        return 64

    def __getitem__(self, index):
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("this dataset cannot be read in a worker")
        return torch.zeros(4), 0


def make_dataset():
    return RaisesInADataLoaderWorker()


class RaisesInItsForward(torch.nn.Module):
    """A model whose every call raises: each variant fails in its first call."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        raise ValueError("raised on purpose")


def make_raising_model():
    return RaisesInItsForward(), torch.zeros(2, 4)


def _run(spec: SweepSpec) -> list[dict]:
    """Each point run here (no pool) and collected into this test's store, as run_sweep does."""
    from accelkit.bench.record import StoreWriter
    from accelkit.results import ResultStore

    with ResultStore() as store:
        writer = StoreWriter(store)
        lines = [collect(p, run_point(p.to_dict(), spec.to_dict(), "run0"), writer, "run0", spec.name)
                 for p in expand(spec)]
        kinds = [[store.get(i).result.kind for i in line["result_ids"]] for line in lines]
    return [line | {"kinds": k} for line, k in zip(lines, kinds, strict=True)]


def test_a_point_whose_only_variant_raised_is_an_error_with_its_phase(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: b1\nworkloads: {{custom: {{module: '{RAISES}'}}}}\n" + LOOP + BENCH)
    (line,) = _run(load_sweep(path))
    assert line["status"] == "error"
    assert line["error"].startswith("fp32 (first call): ValueError: raised on purpose")
    assert line["kinds"] == ["sweep-error"]
    assert line["failed"][0]["phase"] == "first call"


def test_a_point_with_one_variant_measured_and_one_raised_stays_ok_and_lists_the_failure(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: dl\nworkloads: {{dataloader: {{dataset: '{DATASET}', batch_size: 2, "
                    "num_workers: [0, 1]}}\n" + LOOP + BENCH)
    (line,) = _run(load_sweep(path))
    assert line["status"] == "ok" and line["error"] is None
    assert line["kinds"] == ["bench"]  # the num_workers=0 variant
    (failure,) = line["failed"]
    assert failure["name"].startswith("workers=1") and "DataLoader worker" in failure["error"]


def test_cli_shows_a_failed_point_and_a_point_with_failed_variants(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: mixed\nworkloads:\n  custom: {{module: '{RAISES}'}}\n"
                    f"  dataloader: {{dataset: '{DATASET}', batch_size: 2, num_workers: [0, 1]}}\n"
                    + LOOP + BENCH)
    proc = accelkit("sweep", str(path), "--no-progress", env=WIDE)
    assert proc.returncode == 0, proc.stderr[-3000:]  # one point measured something
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("│ 0 ", "│ 1 "))]
    assert "│ error " in rows[0] and "│ fp32 (first call): ValueError: raised on purpose" in rows[0]
    assert "│ ok " in rows[1] and "samples/s" in rows[1] and "│ FAILED workers=1 pin=off" in rows[1]
    assert "2 points, 1 failed, 1 with failed variants" in proc.stderr
    # (a sweep whose every point failed exits 1: num_failed == points, test_cli_leftovers_interrupt)


@pytest.mark.parametrize(("text", "message"), [
    ("workloads: {resnett: {size: tiny}}\n", r"workloads: unknown workload 'resnett'; did you mean resnet\?"),
    ("workloads: {resnet: {sise: tiny}}\n", r"workloads\['resnet'\]: ResNetConfig has no field sise"),
    ("workloads: {custom: {module: 'm:f'}}\nbatch_sizes: [2]\n",
     r"workloads\['custom'\] with batch_size 2 \(batch_sizes\): CustomConfig has no field batch_size"),
    ("workloads: {resnet: {}}\nloop: {warmup: 2}\n", r"loop: LoopConfig has no field warmup"),
    ("workloads: {resnet: {}}\nbench: {devise: cpu}\n", r"bench: BenchConfig has no field devise"),
    ("workloads: {resnet: {}}\nbench: {loop: {min_time_s: 1}}\n", r"bench has no field loop; .* loop:"),
    ("workloads: {resnet: {}}\nbench: {save: false}\n", r"bench has no field save; a sweep stores every point"),
    ("workloads: {bert: {size: tiny}, resnet: {}}\nlayouts: [{}, {nproc_per_node: 2}]\n",
     r"layouts\[1\]=\{nproc_per_node: 2\} is a torchrun launch, which runs the training workloads llm-train, "
     r"resnet; bert is not one"),
    ("workloads: {resnet: {}}\nbatch_sizes: [2, 4, 2]\n", r"batch_sizes\[2\]=2 repeats batch_sizes\[0\]"),
    ("workloads: {resnet: {}}\nprecisions: [fp32, fp32]\n", r"precisions\[1\]=fp32 repeats precisions\[0\]"),
    ("workloads: {resnet: {}}\nlayouts: [{}, {}]\n", r"layouts\[1\]=\{\} repeats layouts\[0\]"),
    ("workloads: {llm-train: {}}\nlayouts: [{nproc_per_node: 2, zero: 3}, {zero: 3, nproc_per_node: 2}]\n",
     r"layouts\[1\]=\{zero: 3, nproc_per_node: 2\} repeats layouts\[0\]"),
    ("kind: loadtest\nworkloads: {m: {}}\nrates: [1, '1.0']\nloadtest: {base_url: 'http://127.0.0.1:9'}\n",
     r"rates\[1\]=1.0 repeats rates\[0\]"),
    ("kind: loadtest\nworkloads: {m: {num_promts: 2}}\nrates: [1]\nloadtest: {base_url: 'http://127.0.0.1:9'}\n",
     r"workloads\['m'\]: LoadTestConfig has no field num_promts"),
    ("kind: loadtest\nworkloads: {m: {}}\nrates: [1]\n", r"loadtest has no base_url; give the server's root"),
    ("kind: plan\nhardware: h100\nworkloads: {llama-99: {}}\n", r"workloads: unknown model 'llama-99'"),
    ("kind: plan\nhardware: h1000\nworkloads: {tiny-llama: {}}\n", r"hardware: unknown hardware 'h1000'"),
    ("kind: plan\nhardware: h100\nworkloads: {tiny-llama: {task: trian}}\n", r"point 0 \(tiny-llama task=trian.*task"),
    ("kind: plan\nhardware: h100\nworkloads: {tiny-llama: {}}\nlayouts: [{tp: 0}]\n", r"point 0 .*tp"),
    ("kind: bench\nprecisions: [fp32]\n", r"workloads is missing; give at least one"),
])
def test_sweep_file_mistakes_fail_the_load_in_one_line(tmp_path: Path, text: str, message: str):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message) as caught:
        load_sweep(path)
    assert "\n" not in str(caught.value)


def test_cli_a_sweep_file_mistake_is_exit_2_before_any_point_runs(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text("workloads: {resnett: {size: tiny}}\n" + BENCH)
    proc = accelkit("sweep", str(path), "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"error: {path}: workloads: unknown workload 'resnett'; did you mean resnet?"


def test_cli_plan_points_that_do_not_fit_say_so(tmp_path: Path):
    """llama-3.1-8b bf16 training at dp=8 needs ~148 GiB per H100 (80 GB): the fastest-looking rows did not fit."""
    path = tmp_path / "pl.yaml"
    path.write_text("name: pl\nkind: plan\nhardware: h100\nworkloads: {llama-3.1-8b: {seq_len: 4096}}\n"
                    "layouts: [{dp: 8}, {tp: 2, dp: 4}]\n")
    proc = accelkit("sweep", str(path), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [p["fits"] for p in json.loads(proc.stdout)["points"]] == [False, True]
    proc = accelkit("sweep", str(path), env=WIDE)
    rows = [line for line in proc.stdout.splitlines() if "llama-3.1-8b seq_len" in line]
    assert "│ NO " in rows[0] and "148.26 GiB of 79.65 GiB" in rows[0]
    assert "│ yes " in rows[1]
    assert "2 points, 0 failed, 1 do not fit in memory" in proc.stderr
