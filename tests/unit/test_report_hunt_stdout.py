"""`accelkit report --out -` / `--out /dev/stdout`: a user piping the report gets it on stdout. `-` wrote a file
named '-' (and said so), and `/dev/stdout` on a pipe failed with `cannot write the report (No such file or
directory)`, exit 2: the atomic writer resolved it to /proc/<pid>/fd/pipe:[…]. What the command says goes to
stderr, never into the HTML; --json and --open, which need stdout or a file, are refused with it."""

import subprocess
import sys

from tests.conftest import main_in_process


def test_dash_writes_the_report_to_stdout(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = main_in_process(capsys, "report", "--out", "-")
    assert code == 0, err
    assert out.startswith("<!doctype html>") and out.rstrip().endswith("</html>")
    assert err.startswith("wrote the report to stdout (") and "results in the store" in err
    assert list(tmp_path.iterdir()) == []  # no file named '-'


def test_dev_stdout_on_a_pipe_gets_the_report():
    proc = subprocess.run([sys.executable, "-m", "accelkit", "report", "--out", "/dev/stdout"],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(b"<!doctype html>") and proc.stdout.rstrip().endswith(b"</html>")
    assert b"wrote" not in proc.stdout and proc.stderr.startswith(b"wrote the report to stdout")


def test_stdout_with_json_or_open_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (before the fix, a file named '-' was written here)
    code, out, err = main_in_process(capsys, "report", "--out", "-", "--json")
    assert (code, out) == (2, "")
    assert err.strip() == ("error: --out - writes the report to stdout, where --json writes its document; give --out "
                           "a file path, or leave --json out")
    code, out, err = main_in_process(capsys, "report", "--out", "-", "--open")
    assert (code, out) == (2, "") and "--open opens a file" in err
    assert list(tmp_path.iterdir()) == []
