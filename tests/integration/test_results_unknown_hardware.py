"""`results list --hardware NAME` with a name nothing matches lists the known names once each: stored names are
often catalog names too (a plan stores its device's), and they were listed twice ("known: cpu, B200-SXM-180GB,
H100-SXM5-80GB, …, B200-SXM-180GB, …")."""

from accelkit.core import Estimate, Measurement
from accelkit.results import ResultStore


def test_known_names_are_listed_once_in_order(cli, _isolated_home):
    with ResultStore() as store:
        for hardware in ("B200-SXM-180GB", "H100-SXM5-80GB", "B200-SXM-180GB"):
            store.add(Estimate(kind="plan", name="plan", hardware=hardware))
        store.add(Measurement(kind="probe", name="probe", hardware="cpu: Test CPU"))
    proc = cli("results", "list", "--hardware", "qqqqqqqqqqqq")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    known = line.split("known: ", 1)[1].removesuffix(" …").split(", ")
    assert len(known) == len(set(known)), known
    assert known[:4] == ["cpu", "B200-SXM-180GB", "H100-SXM5-80GB", "cpu: Test CPU"]
