"""#30 item 5: text from a store, an import or a server reaches the terminal with its control characters escaped —
a result named with an escape sequence retitled the window and cleared the screen through `results list/show`.
In-process CLI runs on a real store; the bytes printed are checked for any control character."""

from __future__ import annotations

import json
import re

import pytest
from rich.table import Table

from accelkit.cli.app import main
from accelkit.cli.output import SafeConsole, table
from accelkit.core import Measurement
from accelkit.core.terminal import printable
from accelkit.results import ResultStore

TITLE = "\x1b]0;pwned\x07"  # OSC 0: sets the window title
CLEAR = "\x1b[2J\x1b[H"  # erase the screen, cursor home
CSI_C1 = "\x9b31m"  # the one-character CSI of the C1 set
# anything a terminal acts on (newline, tab and the table's own box drawing aside)
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else int(exc.code)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def hostile_store(_isolated_home):
    with ResultStore() as store:
        store.add(Measurement(kind="bench", name=f"fp32{TITLE}{CLEAR}", hardware=f"H100{CSI_C1}", throughput=1.0,
                              throughput_unit=f"tok/s{CLEAR}", details={f"note{CSI_C1}": f"see {TITLE}"},
                              environment={"hostname": f"gpu{CLEAR}"}), run_id=f"run{TITLE}")


@pytest.mark.parametrize("argv", [("results", "list"), ("results", "show", "1"), ("results", "list", "--run",
                                                                                     f"run{TITLE}")])
def test_results_list_and_show_escape_what_the_store_holds(hostile_store, capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert not CONTROL.search(out + err), repr(CONTROL.search(out + err))
    assert "fp32\\x1b]0;pwned\\x07" in out  # shown, so that the user sees what is stored


def test_an_error_naming_a_hostile_value_escapes_it(hostile_store, capsys):
    code, _, err = run(capsys, "results", "list", "--hardware", f"x{CLEAR}")
    assert code == 2 and not CONTROL.search(err) and "x\\x1b[2J" in err and len(err.strip().splitlines()) == 1


def test_an_imported_name_is_escaped_when_listed(tmp_path, capsys):
    record = {"type": "measurement", "kind": "bench", "name": f"imported{TITLE}", "samples": {},
              "hardware": f"cpu{CSI_C1}"}
    path = tmp_path / "in.json"
    path.write_text(json.dumps([record]))
    assert run(capsys, "results", "import", str(path))[0] == 0
    code, out, err = run(capsys, "results", "list")
    assert code == 0 and not CONTROL.search(out + err) and "imported\\x1b]0;pwned\\x07" in out


def test_json_output_stays_exact(hostile_store, capsys):
    """--json is for programs: the name comes back exactly as stored (JSON escapes the controls itself)."""
    code, out, _ = run(capsys, "results", "show", "1", "--json")
    assert code == 0 and json.loads(out)["name"] == f"fp32{TITLE}{CLEAR}" and not CONTROL.search(out)


def test_every_rich_path_is_escaped(capsys):
    """Titles, headers, cells (also those of report tables built as rich Tables), plain lines and JSON: a server's
    answer or a report's variant name goes through the same console."""
    console = SafeConsole(width=120, force_terminal=True)
    t = Table(title=f"title{TITLE}")
    t.add_column(f"col{CLEAR}")
    t.add_row(f"cell{CSI_C1}")
    console.print(t)
    console.print(f"line {TITLE}", markup=False)
    console.print_json(data={f"k{CSI_C1}": f"v{CLEAR}"})
    out = capsys.readouterr().out
    # force_terminal: rich writes its own SGR styles (ESC [ … m); nothing else may carry an ESC
    assert not CONTROL.search(re.sub(r"\x1b\[[0-9;]*m", "", out)), repr(out)
    for shown in ("title\\x1b]0", "col\\x1b[2J", "cell\\x9b31m", "line \\x1b]0;pwned", "k\\\\x9b31m"):
        assert shown in re.sub(r"\x1b\[[0-9;]*m", "", out), shown


def test_printable_keeps_text_and_escapes_only_controls():
    assert printable("naïve 7×8 µs\ttab\nline") == "naïve 7×8 µs\ttab\nline"
    assert printable("\x00\x1b\x7f\x85\x9b") == "\\x00\\x1b\\x7f\\x85\\x9b"


def test_a_vertical_table_has_no_empty_header_row(capsys):
    """#29 item 12: a label/value table with unnamed columns began with a blank header row."""
    SafeConsole(width=60).print(table("Plan", ["", ""], [("model", "llama"), ("devices", "8")]))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].strip() == "Plan" and "model" in lines[2], lines  # title, top border, first row
    SafeConsole(width=60).print(table("Result", ["field", "value"], [("model", "llama")]))
    assert "field" in capsys.readouterr().out.splitlines()[2]  # a named header stays
