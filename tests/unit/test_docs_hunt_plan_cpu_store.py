"""`accelkit plan --hardware cpu` reads this CPU's `hw probe` results from the store (docs/plan.md). A store that cannot
be read — an ACCELKIT_HOME that is a file, an empty (0-byte) results.db (docs/hw.md: one line of error, never taken
as a new store) — was read as empty, and the plan said "no probe of this CPU … run `accelkit hw probe --device cpu`
first", which then fails the same way. It names the store's problem instead; an empty store still gets the probe
hint. In process."""

from tests.conftest import run_cli

ARGS = ("plan", "--model", "tiny-llama", "--hardware", "cpu")


def _one_error(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    return lines[0]


def test_an_accelkit_home_that_is_a_file_is_named(tmp_path):
    home = tmp_path / "home-file"
    home.write_text("")
    line = _one_error(run_cli(*ARGS, env={"ACCELKIT_HOME": str(home)}))
    assert "the results store cannot be read" in line and f"{home} is a file, not a folder" in line
    assert "run `accelkit hw probe" not in line


def test_an_empty_store_file_is_named(tmp_path):
    (tmp_path / "results.db").write_bytes(b"")
    line = _one_error(run_cli(*ARGS, env={"ACCELKIT_HOME": str(tmp_path)}))
    assert "the results store cannot be read" in line and "is an empty (0-byte) file" in line
    assert (tmp_path / "results.db").stat().st_size == 0  # nothing written over it


def test_a_store_without_a_probe_still_says_to_probe(tmp_path):
    line = _one_error(run_cli(*ARGS, env={"ACCELKIT_HOME": str(tmp_path / "new")}))
    assert line == ("error: no probe of this CPU in the results store; run `accelkit hw probe --device cpu` first, "
                    "then plan with --hardware cpu")


def test_the_memory_efficiency_note_names_its_reference_in_plain_words():
    # a CPU probe's elementwise add is a fraction of "this probe's copy bandwidth": the note read "(of the this
    # probe's copy bandwidth; …)"
    from accelkit.plan.calibrate import _kernel_notes

    for reference, words in (("this probe's copy bandwidth", "(of this probe's copy bandwidth; t)"),
                             ("catalog HBM bandwidth", "(of the catalog HBM bandwidth; t)")):
        found, notes = _kernel_notes({"elementwise": {"fraction_of_peak": 0.9, "reference": reference}}, "t")
        assert found == {"memory": 0.9} and notes[0].endswith(words), notes


def test_an_attention_efficiency_past_the_probes_matmul_is_capped_and_said():
    """A small or quick probe's matmul can read below its own attention: the efficiency read 7.81 and the plan's MFU
    384%. Capped at 1, as the memory efficiency is, and the note says what was measured."""
    from accelkit.plan.calibrate import _kernel_notes

    shape = {"seq": 512, "head_dim": 64}
    found, notes = _kernel_notes({"attention": {"fraction_at_long_sequence": 7.81, "shape": shape}}, "t")
    assert found == {"attention": 1.0} and notes[0].endswith("— measured 7.81, past the probe's matmul peak: capped at 1")
    found, notes = _kernel_notes({"attention": {"fraction_at_long_sequence": 0.4, "shape": shape}}, "t")
    assert found == {"attention": 0.4} and "capped" not in notes[0]
