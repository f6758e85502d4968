"""No function in accelkit above cyclomatic complexity 25 (radon's McCabe count, the figure `radon cc` prints): a
function past it has too many paths to read or test at once — split it into named steps (docs/development.md)."""

from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

ROOT = Path(__file__).resolve().parents[2] / "accelkit"
MAX_COMPLEXITY = 25


def _functions(blocks: list) -> Iterator[Function]:
    """Every function, method and closure (radon scores a closure on its own, not in its parent's figure)."""
    for block in blocks:
        if isinstance(block, Function):
            yield block
            yield from _functions(block.closures)


def test_no_function_is_above_the_complexity_limit():
    too_complex = []
    for path in sorted(ROOT.rglob("*.py")):
        for f in _functions(cc_visit(path.read_text(encoding="utf-8"))):
            if f.complexity > MAX_COMPLEXITY:
                name = f"{f.classname}.{f.name}" if f.classname else f.name
                too_complex.append(f"{path.relative_to(ROOT.parent)}:{f.lineno} {name} has complexity {f.complexity}")
    assert not too_complex, (f"above {MAX_COMPLEXITY} (split into named helpers):\n" + "\n".join(too_complex))


def test_the_check_sees_a_function_past_the_limit():
    """The walk reaches methods and closures: a generated closure with 26 branches is reported."""
    branches = "".join(f"            if x == {i}:\n                return {i}\n" for i in range(MAX_COMPLEXITY))
    source = f"class A:\n    def method(self, x):\n        def inner(x):\n{branches}            return -1\n        return inner(x)\n"
    scores = {f.name: f.complexity for f in _functions(cc_visit(source))}
    assert scores == {"method": 1, "inner": MAX_COMPLEXITY + 1}
