"""A `hw probe` stopped by SIGTERM (or Ctrl-C) ends its progress without `probing: done`: the line before
`terminated by SIGTERM: … nothing was stored` said the probe was done. A real process, since its signal handling is
what is tested."""

import signal

from tests.conftest import accelkit_popen


def test_an_interrupted_probe_does_not_say_done():
    # a long fp32 loop (--min-time 60) at a small side: the signal lands in it
    proc = accelkit_popen("hw", "probe", "--device", "cpu", "--dtype", "fp32", "--size", "128", "--copy-size", "1MiB",
                          "--min-time", "60", "--no-save", "--progress", "--json")
    try:
        lines = []
        while "matmul fp32" not in (line := proc.stderr.readline()):
            assert line, lines
            lines.append(line)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143 and stdout == "", stderr
    last = stderr.strip().splitlines()
    assert last[-1].startswith("terminated by SIGTERM: nothing was measured yet; not measured: fp32"), stderr
    assert not any(line.endswith("probing: done") for line in last), stderr
