"""The results store when things go wrong, on real SQLite files and the real CLI (issue #15, "Results store"):
a corrupt row or page hides only itself, a read-only store reads, a 0-byte file is refused, and a measuring
command never throws a finished measurement away because the store cannot take it."""

import ctypes
import json
import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from accelkit.core import AccelkitError, Estimate, Measurement
from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from accelkit.results import ResultStore
from tests.conftest import REPO, accelkit_in_one_process, run_cli

PAGE = 4096


def _fill(path: Path, n: int, samples: int = 4) -> None:
    with ResultStore(path) as store:
        for i in range(n):
            store.add(Measurement(kind="bench", name=f"m{i + 1}", hardware="cpu: test",
                                  samples={"s": [float(i)] * samples}))


def _listed(cli, *extra):
    proc = cli("results", "list", "--limit", "100000", "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return [r["id"] for r in json.loads(proc.stdout)], proc.stderr


def test_a_corrupt_row_is_skipped_with_a_warning_naming_it(cli, _isolated_home):
    path = _isolated_home / "results.db"
    _fill(path, 5)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE results SET payload = '{\"kind\": \"bench\", ' WHERE id = 3")  # cut-off JSON
    conn.execute("UPDATE results SET environment = CAST(X'FFFE' AS TEXT) WHERE id = 4")  # not UTF-8
    conn.commit()
    conn.close()

    ids, stderr = _listed(cli)
    assert ids == [5, 2, 1]
    assert "skipped result 3: payload is not valid JSON" in stderr
    assert "skipped result 4: environment is not valid UTF-8" in stderr

    proc = cli("results", "export", "--format", "csv")
    assert proc.returncode == 0 and len(proc.stdout.strip().splitlines()) == 1 + 3
    assert "skipped result 3" in proc.stderr

    proc = cli("results", "show", "3")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line
    assert "result 3" in proc.stderr and "cannot be decoded" in proc.stderr and "Traceback" not in proc.stderr
    assert cli("results", "show", "2", "--json").returncode == 0


def test_a_damaged_page_hides_only_the_rows_on_it(cli, _isolated_home):
    path = _isolated_home / "results.db"
    _fill(path, 300, samples=200)  # ~1 row per 2 KB: ~150 pages
    with open(path, "r+b") as f:  # garble one leaf page in the middle of the table
        f.seek(60 * PAGE)
        f.write(b"\xde\xad" * (PAGE // 2))

    with pytest.raises(sqlite3.DatabaseError, match="malformed"):  # the damage is real: a plain scan fails
        sqlite3.connect(path).execute("SELECT id, payload FROM results").fetchall()
    ids, stderr = _listed(cli)
    skipped = {int(line.split("skipped result ")[1].split(":")[0]) for line in stderr.splitlines()
               if "skipped result " in line}
    assert 250 <= len(ids) < 300 and skipped and not skipped & set(ids)
    assert set(ids) | skipped == set(range(1, 301))  # every row is either listed or named
    export = json.loads(cli("results", "export").stdout)
    assert len(export) == len(ids) and all(len(r["samples"]["s"]) == 200 for r in export)


def test_a_truncated_store_is_read_row_by_row_and_refused_for_writing(cli, _isolated_home):
    path = _isolated_home / "results.db"
    _fill(path, 300, samples=200)
    size = path.stat().st_size
    os.truncate(path, size // 2)

    ids, stderr = _listed(cli)
    assert 100 <= len(ids) < 300 and "the store is damaged" in stderr
    proc = cli("hw", "probe", "--quick", "--device", "cpu", "--size", "64", "--copy-size", "1MiB", "--min-time", "0",
               "--progress")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "is damaged" in proc.stderr and "results export" in proc.stderr and "Traceback" not in proc.stderr
    assert "probing:" not in proc.stderr  # refused before measuring
    assert path.stat().st_size == size // 2  # and nothing written


def test_an_empty_file_is_refused_not_taken_as_a_new_store(cli, _isolated_home):
    path = _isolated_home / "results.db"
    _isolated_home.mkdir(parents=True)
    path.touch()
    for args in (("results", "list"), ("hw", "probe", "--quick", "--device", "cpu", "--size", "64", "--min-time", "0",
                                              "--progress")):
        proc = cli(*args)
        assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr
        assert "empty (0-byte) file" in proc.stderr and "move it aside" in proc.stderr
        assert "probing:" not in proc.stderr
    assert path.stat().st_size == 0  # left as it was


def test_new_stores_created_at_once_by_several_processes_lose_nothing(tmp_path):
    """A new store is made in a temporary file and linked into place; racing creators end with one store."""
    path = tmp_path / "new" / "results.db"
    code = ("import sys; from accelkit.core import Estimate; from accelkit.results import ResultStore\n"
            "with ResultStore(sys.argv[1]) as s:\n    s.add(Estimate(kind='plan', name=sys.argv[2]))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), f"p{i}"], cwd=REPO) for i in range(6)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    with ResultStore(path, readonly=True) as store:
        assert sorted(s.result.name for s in store.query()) == [f"p{i}" for i in range(6)]
    assert not [p.name for p in path.parent.iterdir() if p.name.endswith(".new")]  # no temporary file left behind


# ---- a store we may not write ------------------------------------------------------------------------------
def _without_dac_override() -> None:
    """Run as root would run without its override of file modes: tests often run as root, and root ignores
    chmod. Dropping CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set (PR_CAPBSET_DROP) before
    exec makes the modes apply to the child exactly as to any other user."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _accelkit_unprivileged(home: Path, *commands: tuple[str, ...]) -> list[subprocess.CompletedProcess]:
    """Each command as a process without root's file-mode override runs it: one such process for them all, each
    command through the CLI's entry point (a process per command is test_cli_processes.py's; a process start here
    is an interpreter importing torch)."""
    return accelkit_in_one_process(home, [list(c) for c in commands], _without_dac_override)


@pytest.fixture
def readonly_home(_isolated_home):
    """A store of 3 rows in a folder and file that are read-only for the command (mode 555 / 444)."""
    _fill(_isolated_home / "results.db", 3)
    (_isolated_home / "results.db").chmod(0o444)
    _isolated_home.chmod(0o555)
    probe = subprocess.run([sys.executable, "-c", f"open({str(_isolated_home / 'x')!r}, 'w')"], capture_output=True,
                           preexec_fn=_without_dac_override)
    try:
        if probe.returncode == 0:  # the condition could not be made real here; say so instead of passing
            pytest.skip("cannot make a folder read-only for a child process here (root without CAP_SETPCAP?)")
        yield _isolated_home
    finally:
        _isolated_home.chmod(0o755)


def test_a_read_only_store_can_be_read(readonly_home, tmp_path):
    out = tmp_path / "export.csv"
    listed, shown, exported = _accelkit_unprivileged(
        readonly_home, ("results", "list", "--json"), ("results", "show", "2", "--json"),
        ("results", "export", "--format", "csv", "--out", str(out)))
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)] == [3, 2, 1]
    assert shown.returncode == 0 and json.loads(shown.stdout)["name"] == "m2"
    assert exported.returncode == 0 and len(out.read_text().splitlines()) == 4
    assert sorted(p.name for p in readonly_home.iterdir()) == ["results.db"]  # no -wal/-shm could appear


def test_a_measuring_command_checks_the_store_before_measuring(readonly_home):
    probe = ("hw", "probe", "--quick", "--device", "cpu", "--size", "64", "--copy-size", "1MiB", "--min-time", "0")
    proc, unsaved = _accelkit_unprivileged(readonly_home, (*probe, "--progress", "--json"), (*probe, "--no-save", "--json"))
    assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert str(readonly_home / "results.db") in proc.stderr and "--no-save" in proc.stderr
    assert "probing:" not in proc.stderr  # nothing was measured, so nothing was thrown away
    assert unsaved.returncode == 0 and json.loads(unsaved.stdout)["kind"] == "probe"


@pytest.mark.parametrize("with_wal", [False, True])
def test_a_read_only_store_file_in_a_writable_folder_is_refused_at_open(_isolated_home, with_wal):
    """The store file read-only, its folder writable (a copied-in store, chmod 444): SQLite opened it read-only
    without a word and the open's BEGIN IMMEDIATE writes nothing, so it passed, and the first add failed — after the
    measurement. Refused at open now, whether or not -wal/-shm files (read-only too) sit beside it."""
    path = _isolated_home / "results.db"
    _fill(path, 2)
    if with_wal:  # a copy taken while another process had it open: -wal and -shm beside it
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("SELECT COUNT(*) FROM results").fetchone()
    files = sorted(_isolated_home.iterdir())
    for f in files:
        f.chmod(0o444)
    try:
        probe = subprocess.run([sys.executable, "-c", f"open({str(path)!r}, 'r+')"], capture_output=True,
                               preexec_fn=_without_dac_override)
        if probe.returncode == 0:  # the condition could not be made real here; say so instead of passing
            pytest.skip("cannot make a file read-only for a child process here (root without CAP_SETPCAP?)")
        code = ("import sys; from accelkit.results import ResultStore; s = ResultStore(sys.argv[1]); "
                "print('opened'); from accelkit.core import Estimate; s.add(Estimate(kind='plan', name='x'))")
        proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                              cwd=REPO, preexec_fn=_without_dac_override)
        assert proc.returncode == 1 and proc.stdout == "", (proc.stdout, proc.stderr)
        assert f"cannot open the results store {path}: {path} cannot be written" in proc.stderr, proc.stderr
    finally:
        for f in files:
            f.chmod(0o644)
        if with_wal:
            conn.close()
    with ResultStore(path, readonly=True) as store:
        assert store.count() == 2


def test_a_result_the_store_cannot_take_is_printed_not_lost(_isolated_home):
    """`loadtest` with the store's disk 'full' when it writes (RLIMIT_FSIZE: the same EFBIG a full quota gives):
    the store opened fine before the test, the write fails after it, and the measurement comes out on stdout."""
    ResultStore(_isolated_home / "results.db").close()

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))  # the store is 20 KiB; the row is ~200

    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.001, itl_s=0.001)) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "accelkit", "loadtest", "--base-url", server.base_url, "--model", "fake-model",
             "--num-prompts", "300", "--random-input-len", "10", "--random-output-len", "4", "--json"],
            capture_output=True, text=True, timeout=300, env=dict(os.environ), cwd=REPO, preexec_fn=small_files)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "was not stored; its JSON is printed on stdout" in proc.stderr and "disk full" in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "loadtest" and doc["details"]["passes"][0]["completed"] == 300
    with ResultStore(_isolated_home / "results.db", readonly=True) as store:
        assert store.count() == 0  # nothing half-written


def test_store_api_reads_and_writes_fail_as_accelkit_errors(tmp_path):
    """The library behind it: a read-only handle refuses writes; a huge id is 'no such result'."""
    path = tmp_path / "r.db"
    with ResultStore(path) as store:
        store.add(Estimate(kind="plan", name="e"))
    with ResultStore(path, readonly=True) as store:
        with pytest.raises(AccelkitError, match="opened read-only"):
            store.add(Estimate(kind="plan", name="x"))
        with pytest.raises(AccelkitError, match="no result with id 99999999999999999999999"):
            store.get(99999999999999999999999)
        assert store.distinct("kind") == ["plan"]
    with ResultStore(tmp_path / "missing" / "r.db", readonly=True) as store:  # reading creates nothing
        assert store.count() == 0
    assert not (tmp_path / "missing").exists()


# ---- a bench whose store stops taking writes mid-run (the measurements must survive) ------------------------
#: two variants of a small custom model (test_bench_cli's MLP): what these tests check is the store, not the model, and
#: a process running it imports no transformers (about 2 s of CPU in the bench subprocess below)
BENCH_TINY = ("bench", "custom", "--module", "tests.integration.test_bench_cli:make_mlp", "--precision", "fp32,bf16",
              "--warmup", "1", "--warmup-time", "0", "--min-iterations", "3", "--min-time", "0")


def _held(path: Path) -> sqlite3.Connection:
    """Another writer holding the store's write lock (as a second accelkit process mid-write would)."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_bench_whose_store_is_locked_keeps_every_variant_and_stops_writing(_isolated_home):
    """The store opened fine; then another process holds its lock for the whole run (a 0.05 s lock timeout here,
    60 s by default). Every variant is measured and returned, the first refused write is the last one tried."""
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import matrix
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    path = _isolated_home / "results.db"
    store = ResultStore(path, timeout_s=0.05)
    writes: list[str] = []
    store._conn.set_trace_callback(lambda sql: writes.append(sql) if sql.startswith("BEGIN") else None)
    holder = _held(path)
    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=3, min_time_s=0)
    try:
        run = run_benchmark(make_workload("bert", {"size": "tiny", "batch_size": 2, "seq_len": 16}),
                            matrix(["fp32", "bf16"]), BenchConfig(device="cpu", loop=loop, auto_probe=False),
                            store=store)
    finally:
        holder.execute("ROLLBACK")
    assert [v.name for v in run.variants] == ["fp32", "bf16"] and all(v.throughput.value for v in run.variants)
    assert run.result_ids == [] and [v.result_id for v in run.variants] == [None, None] and not run.failed
    assert run.store_error and "stayed locked by another process for 0.05 s" in run.store_error
    assert run.to_json()["store_error"] == run.store_error
    assert len(writes) == 1  # not one lock timeout per variant
    assert store.count() == 0
    store.close()


def test_tune_whose_store_is_locked_returns_every_trial(probed):
    from accelkit.bench.workloads import make_workload
    from accelkit.tune import tune
    from accelkit.tune.search import QUICK_LOOP, TuneConfig

    store = ResultStore(probed / "results.db", timeout_s=0.05)  # holds a probe: no quick probe is written first
    holder = _held(probed / "results.db")
    try:
        result = tune(make_workload("bert", {"size": "tiny", "batch_size": 2, "seq_len": 16}),
                      TuneConfig(max_trials=2, compile=False, device="cpu",
                                 loop=QUICK_LOOP.replace(warmup_time_s=0.1, min_time_s=0.1)), store=store)
    finally:
        holder.execute("ROLLBACK")
        store.close()
    measured = [t for t in result.trials if t.status == "measured"]
    assert len(measured) == 2 and all(t.throughput for t in measured)
    assert result.store_error and "locked" in result.store_error and result.result_id is None


def test_bench_prints_what_the_store_cannot_take(_isolated_home):
    """`bench --json` with the store's disk 'full' when it writes (RLIMIT_FSIZE, as for loadtest above): both
    variants come out on stdout, stderr says why they were not stored, exit 1."""
    ResultStore(_isolated_home / "results.db").close()

    def small_files() -> None:  # the store is 20 KiB and its -shm index 32 KiB: the second row fills the WAL
        resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, 32 * 1024))

    proc = subprocess.run([sys.executable, "-m", "accelkit", *BENCH_TINY, "--no-probe", "--json"], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ), cwd=REPO, preexec_fn=small_files)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "disk full" in proc.stderr
    doc = json.loads(proc.stdout)
    assert [v["name"] for v in doc["variants"]] == ["fp32", "bf16"] and "disk full" in doc["store_error"]
    # stderr names what made it into the store before the disk filled, and what did not
    stored = [f"{v['name']} · forward (result {v['result_id']})" for v in doc["variants"] if v["result_id"]]
    if stored:
        assert f"Stored before the failure: {', '.join(stored)}; not stored: bf16 · forward" in proc.stderr
    else:
        assert "was not stored; its JSON is printed on stdout" in proc.stderr
    assert all(v["throughput"]["value"] > 0 for v in doc["variants"])
    with ResultStore(_isolated_home / "results.db", readonly=True) as store:
        assert store.count() == len(doc["result_ids"])  # what was stored before the disk filled, nothing half-written


def test_bench_no_save_writes_and_creates_nothing(_isolated_home, cli):
    """--no-save reads the store (a stored probe is reused) but never writes it: on a fresh home no store appears,
    and the quick probe run for MFU is used from memory; a store that cannot even be read is not needed."""
    proc = cli(*BENCH_TINY, "--no-save", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["result_ids"] == [] and "store_error" not in doc
    assert all("run by this bench (not stored)" in v["mfu"]["peak_source"] for v in doc["variants"])
    assert not (_isolated_home / "results.db").exists()
    (_isolated_home / "results.db").mkdir(parents=True)  # not a store at all
    proc = cli(*BENCH_TINY, "--no-save", "--no-probe", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "is a directory" in proc.stderr and [v["name"] for v in json.loads(proc.stdout)["variants"]] == ["fp32", "bf16"]


def test_report_only_reads_the_store(cli, _isolated_home, tmp_path):
    """`accelkit report` creates no store, does not queue behind another writer's lock (it took the write lock and
    waited 60 s), and names the rows it had to skip."""
    out = tmp_path / "r.html"
    proc = cli("report", "--out", str(out), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["results_in_store"] == 0, proc.stderr
    assert not (_isolated_home / "results.db").exists()
    path = _isolated_home / "results.db"
    _fill(path, 3)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE results SET payload = '{\"kind\": \"bench\", ' WHERE id = 2")  # cut-off JSON
    conn.commit()
    conn.close()
    holder = _held(path)
    try:
        proc = run_cli("report", "--out", str(out), "--json", timeout=30)  # the writable open waited 60 s here
    finally:
        holder.execute("ROLLBACK")
    assert proc.returncode == 0 and json.loads(proc.stdout)["results_in_store"] == 3, proc.stderr
    assert "skipped result 2: payload is not valid JSON" in proc.stderr
