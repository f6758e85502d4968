"""Issue #18 items 5 and 6 on the real CLI (stderr not a terminal; the import-noise test in a fresh process): long steps
show progress on stderr with --progress and stay quiet without it, stdout stays one JSON document under
--json, and known-harmless import noise is gone while real warnings still show."""

import json
import os
import subprocess
import sys

import pytest

from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from tests.conftest import REPO, accelkit_subprocess

NOISE = ("_C_mxfp8", "_C_cutlass_90a", "is now natively supported by torch.compile", "register_constant()")
PROBE = ("hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32,bf16", "--size", "64", "--copy-size", "1MiB",
         "--min-time", "0", "--no-save", "--json")


def test_probe_progress_is_on_stderr_only_when_asked(cli):
    shown = cli(*PROBE, "--progress")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["kind"] == "probe"  # stdout: the document, nothing else
    for step in ("probing: matmul fp32 64×64", "probing: matmul bf16 64×64", "probing: copy 1 MiB", "probing: done"):
        assert step in shown.stderr
    quiet = cli(*PROBE, "--no-progress")
    assert quiet.returncode == 0 and quiet.stderr == ""  # --no-progress: none, even on a long run


def test_loadtest_sweep_progress_under_json(cli):
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.002, itl_s=0.001)) as server:
        args = ("loadtest", "--base-url", server.base_url, "--model", "fake-model", "--num-prompts", "20",
                "--random-input-len", "8", "--random-output-len", "4", "--sweep-rates", "200,inf", "--no-save", "--json")
        shown = cli(*args, "--progress")
        quiet = cli(*args, "--no-progress")
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)["details"]["curve"]) == 2
    assert "load test: warmup" in shown.stderr and "load test: rate 200" in shown.stderr
    assert "load test: rate inf" in shown.stderr and "load test: done" in shown.stderr
    assert quiet.returncode == 0 and quiet.stderr == "" and json.loads(quiet.stdout)["kind"] == "loadtest"


def test_import_noise_is_filtered_and_real_warnings_kept(tmp_path):
    baseline = subprocess.run([sys.executable, "-c", "import torchao.quantization"], capture_output=True, text=True,
                              cwd=REPO, timeout=300)
    # a process of its own: import-time warnings show once per process, so only a fresh one shows what a user sees
    proc = accelkit_subprocess("profile", "--module", "tests.integration.noisy_workload:factory", "--wait", "0",
                               "--warmup", "1", "--steps", "1", "--out", str(tmp_path / "prof"), "--no-save", "--json",
                               "--progress")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["workload"].startswith("custom")
    assert not [line for line in proc.stderr.splitlines() if any(n in line for n in NOISE)], proc.stderr
    assert "torchao: a real warning that must still show" in proc.stderr
    assert "a real UserWarning from the user's model" in proc.stderr
    assert "profiling: building" in proc.stderr  # its progress, asked for
    if not any(n in baseline.stderr for n in NOISE):  # say what this run proved
        pytest.xfail("this torchao loads its extensions without complaint here: the filter had nothing to drop "
                     "(real warnings still shown, checked above)")


def test_the_filter_drops_only_the_named_messages():
    code = (
        "import logging, accelkit\n"
        "logging.basicConfig(format='%(name)s: %(message)s')\n"
        "ao, tree = logging.getLogger('torchao'), logging.getLogger('torch.utils._pytree')\n"
        "ao.warning('Failed to load /x/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: Could not load')\n"
        "ao.warning('Failed to load /x/torchao/_C_cutlass_90a.abi3.so: Could not load this library')\n"
        "ao.warning('Failed to load /x/torchao/_C_other.so: Could not load this library')\n"
        "tree.warning(\"%s is an Enum subclass and is now natively supported by torch.compile as an opaque value \"\n"
        "             \"type. Calling register_constant() on Enum subclasses is deprecated and will be an error\", 'E')\n"
        "tree.warning('some other pytree warning')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "torchao: Failed to load /x/torchao/_C_other.so: Could not load this library",
        "torch.utils._pytree: some other pytree warning",
    ]
