"""`accelkit profile` drops kineto's start/stop status lines from stderr and passes everything else through."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import os, sys, torch
    from accelkit.monitor.profiler import ProfileConfig, profile_step
    x = torch.randn(32, 32)
    n = [0]
    def step():
        n[0] += 1
        print(f"python line {n[0]}", file=sys.stderr)
        os.write(2, f"fd line {n[0]}\\n".encode())
        os.write(2, b"US")  # could start a status line: held until the line is whole
        os.write(2, f"ER line {n[0]}\\n".encode())
        x @ x
    profile_step(step, ProfileConfig(wait=1, warmup=1, steps=2, out_dir=sys.argv[1]))
    print("after", file=sys.stderr)
""")


def test_profile_keeps_stderr_but_not_kineto_status_lines(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert not [line for line in lines if line.startswith(("USDT:", "STAGE:"))], proc.stderr
    expected = [f"{kind} line {i}" for i in range(1, 5) for kind in ("python", "fd", "USER")] + ["after"]
    assert [line for line in lines if line in expected] == expected, proc.stderr
    assert (tmp_path / "trace.json").stat().st_size > 0
