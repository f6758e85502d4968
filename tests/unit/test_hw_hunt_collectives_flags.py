"""`hw probe --collectives` with the matmul and copy probe's --size, --copy-size or --dtype: refused in one line,
exit 2 — they were silently ignored (`--collectives --copy-size 1GiB` measured the default message sizes, and
`--dtype bf16` the collectives' own dtype, saying nothing)."""

import pytest

from tests.conftest import main_in_process


@pytest.mark.parametrize(("flags", "says"), [
    (("--size", "1024"), "--size applies to the matmul and copy probe, not --collectives; drop it"),
    (("--copy-size", "1GiB", "--dtype", "bf16"),
     "--copy-size, --dtype apply to the matmul and copy probe, not --collectives; drop them"),
])
def test_matmul_flags_with_collectives_are_refused_not_ignored(capsys, flags, says):
    code, out, err = main_in_process(capsys, "hw", "probe", "--collectives", "--no-save", *flags)
    assert code == 2 and out == "" and err.strip().splitlines() == [
        f"error: {says} (--max-message-size sets the largest collective message)"], err
