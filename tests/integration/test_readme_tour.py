"""Issue #29 items 7 and 10 (acceptance 5): the README's short tour runs as written, on the tiny model it
suggests — its commands parsed from README.md and run in-process (the server on 127.0.0.1 in a thread of this
process, the loadtest against it). `hw probe` and the full-length `bench` are left to their own tests (minutes on
a CPU); the test says which lines it ran, so a new tour line cannot be skipped unnoticed."""

from __future__ import annotations

import re
import shlex

from tests.conftest import REPO, run_cli
from tests.integration.serve_server_util import running_server

SLOW = ("accelkit hw probe", "accelkit bench ")


def _tour() -> list[str]:
    readme = (REPO / "README.md").read_text()
    block = readme.split("## A short tour", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #")[0].strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _run(capsys, words: list[str]) -> tuple[int, str, str]:
    """`accelkit WORDS` through the console script's entry point in this test's directory (the working directory,
    as the reader's shell has it), with its own stdout and stderr (`run_cli`): each command as its own process is
    test_cli_processes.py's; a process here is an interpreter importing torch for nothing this test checks."""
    del capsys
    proc = run_cli(*words)
    return proc.returncode, proc.stdout, proc.stderr


def test_the_tour_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ran, server = [], None
    lines = _tour()
    try:
        for line in lines:
            if line.startswith(SLOW):
                continue
            words = shlex.split(line)
            if words[0] == "python":
                assert words[1] == "-c"
                exec(compile(words[2], "README tour", "exec"), {})
            elif words[:2] == ["accelkit", "serve"]:
                assert words[-1] == "&"
                model, name = words[words.index("--model") + 1], words[words.index("--served-model-name") + 1]
                server = running_server(str(tmp_path / model), name=name)
                url, _ = server.__enter__()
            elif words[:2] == ["accelkit", "loadtest"]:
                assert server is not None, "the tour starts the server before it load-tests it"
                args = [url if w == "http://127.0.0.1:8000" else w for w in words[1:]]
                code, out, err = _run(capsys, args)
                assert code == 0, err
                assert re.search(r"successful requests\s+│\s+40\b", out), out
                assert re.search(r"failed requests\s+│\s+0\b", out), out
                # the same line without its lengths (the tour before #29): the default 1,024 words are ~4.8K tokens
                # of this model, past its context; the error says which flag to lower
                drop = {"--random-input-len", "--random-output-len"}
                short = [w for i, w in enumerate(args) if w not in drop and (i == 0 or args[i - 1] not in drop)]
                code, _, err = _run(capsys, [*short, "--num-prompts", "2", "--no-save"])
                assert code == 1 and "lower --random-input-len to about" in err, err
            else:
                assert words[0] == "accelkit", line
                code, out, err = _run(capsys, words[1:])
                assert code == 0, (line, err)
            ran.append(line)
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    assert (tmp_path / "report.html").stat().st_size > 10_000
    assert [line for line in lines if line not in ran] == [line for line in lines if line.startswith(SLOW)]
    assert len(ran) == 6, ran
