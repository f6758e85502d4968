"""`bench --no-save` and the MFU probe, as docs/bench.md says: no store yet reads as an empty store, so the quick
probe still runs and is used from memory (nothing is created); a store that exists but cannot be read is skipped
with a note, and then no probe runs and MFU says why it is unavailable."""

import json

BENCH = ("bench", "bert", "--size", "tiny", "--batch-size", "2", "--seq-len", "16", "--precision", "fp32",
         "--device", "cpu", "--warmup", "1", "--warmup-time", "0", "--min-iterations", "3", "--min-time", "0",
         "--no-accuracy", "--no-predict", "--no-save", "--json")


def test_no_store_yet_runs_the_quick_probe_in_memory(_isolated_home, cli):
    proc = cli(*BENCH)
    assert proc.returncode == 0, proc.stderr
    (variant,) = json.loads(proc.stdout)["variants"]
    assert variant["mfu"]["value"] > 0
    assert "a quick `accelkit hw probe` run by this bench (not stored)" in variant["mfu"]["peak_source"]
    assert not (_isolated_home / "results.db").exists()


def test_an_unreadable_store_runs_no_probe_and_says_why_mfu_is_missing(_isolated_home, cli):
    (_isolated_home / "results.db").mkdir(parents=True)  # there, but not a store
    proc = cli(*BENCH)
    assert proc.returncode == 0, proc.stderr
    assert "measuring without it (--no-save: nothing is stored)" in proc.stderr
    (variant,) = json.loads(proc.stdout)["variants"]
    assert variant["mfu"]["value"] is None
    assert ("MFU unavailable: no results store to read a probe from; run `accelkit hw probe --device cpu --dtype fp32`"
            in variant["mfu"]["peak_source"])
