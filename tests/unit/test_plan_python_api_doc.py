"""docs/python-api.md's `accelkit.plan.compare` example prints what its comment lines show: the block is run and each
printed line checked against them (it had gone stale: B200 on one device where the default basis now gives both two,
and a Layout repr without recompute_every and shard_group — found in review). In process."""

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def _compare_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    (block,) = [b for b in blocks if "P.compare(" in b]
    return block


def test_the_compare_example_prints_its_comment_lines():
    block = _compare_block()
    shown = [line[2:] for line in block.splitlines() if line.startswith("# ")]
    assert len(shown) == 2, block
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, str(DOC), "exec"), {})  # the documented snippet, as a reader runs it
    assert printed.getvalue().splitlines() == shown
