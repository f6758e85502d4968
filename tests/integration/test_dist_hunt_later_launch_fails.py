"""A distributed bench runs one torchrun launch per precision. When a later launch's ranks failed, the error was
the whole answer (exit 1, nothing on stdout): the precisions measured and stored by the launches before it were not
printed — under --no-save, lost (found in a hunt). They are kept as a single-process bench keeps the variants beside
one that raised: the document has them, the failed precision is under ``failed`` with the ranks' error, exit 1."""

from __future__ import annotations

import json
import os

from tests.conftest import accelkit

#: rank 1 raises while it builds the variant named ACCELKIT_HUNT_FAIL_VARIANT (torchrun hands the ranks this
#: process's environment, PYTHONPATH included); other processes have no LOCAL_RANK and are left alone
SITECUSTOMIZE = '''import os
if "LOCAL_RANK" in os.environ and os.environ.get("RANK") == "1":
    import accelkit.distributed.parallel as parallel
    _real = parallel.train_parts
    def _raising(workload, variant, *args, **kwargs):
        if variant.name == os.environ["ACCELKIT_HUNT_FAIL_VARIANT"]:
            raise RuntimeError("injected failure building " + variant.name)
        return _real(workload, variant, *args, **kwargs)
    parallel.train_parts = _raising
'''


def test_a_later_precision_whose_ranks_fail_keeps_the_earlier_ones(tmp_path, monkeypatch):
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("ACCELKIT_HUNT_FAIL_VARIANT", "bf16")
    proc = accelkit("bench", "resnet", "--size", "tiny", "--batch-size", "2", "--image-size", "32", "--device", "cpu",
                    "--nproc-per-node", "2", "--warmup", "1", "--warmup-time", "0", "--min-iterations", "2",
                    "--min-time", "0", "--no-probe", "--no-predict", "--precision", "fp32,bf16", "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)  # the one document, with what the first launch measured
    assert [v["name"] for v in doc["variants"]] == ["fp32"] and doc["variants"][0]["result_id"] is not None
    [failed] = doc["failed"]
    assert failed["name"] == "bf16" and failed["phase"] == "launch"
    assert "rank 1 (" in failed["error"] and "RuntimeError: injected failure building bf16" in failed["error"]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 variant(s) failed: bf16 (launch)") and "the other 1 was measured and stored" in last
