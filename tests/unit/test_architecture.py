"""The package layering of docs/architecture.md, checked on the real import graph (module-level imports and
those inside functions): a package imports only packages in lower layers, so there is no cycle."""

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "accelkit"

# docs/architecture.md, "Packages, bottom to top"
LAYERS = [
    {"core"},
    {"timing"},
    {"models", "hardware"},
    {"results"},
    {"plan"},
    {"recipes"},
    {"bench"},
    {"distributed", "monitor"},
    {"serve", "tune", "loadtest"},
    {"report", "sweep"},
    {"cli"},
]
LAYER = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _imports(path: Path) -> set[str]:
    """accelkit packages imported anywhere in ``path`` (TYPE_CHECKING blocks included: they are still edges)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "accelkit" and len(parts) > 1 and (ROOT / parts[1]).is_dir():
                found.add(parts[1])
    return found


def test_every_package_has_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYER), f"add to LAYERS (and docs/architecture.md): {packages ^ set(LAYER)}"


def test_packages_import_only_lower_layers():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if len(rel.parts) < 2:
            continue  # accelkit/__init__.py, __main__.py: the entry points
        pkg = rel.parts[0]
        for target in _imports(path) - {pkg}:
            if LAYER[target] >= LAYER[pkg]:
                bad.append(f"{rel} imports accelkit.{target} (layer {LAYER[target]} ≥ {pkg}'s {LAYER[pkg]})")
    assert not bad, "\n".join(bad)


# ---- modules: no circle inside a package, and every import of ours inside a function says why ----------------
MODULES = {".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__"): p
           for p in ROOT.rglob("*.py")}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int  # where the import statement starts
    end_line: int
    in_function: bool


def _module_of(dotted: str) -> str | None:
    """The accelkit module ``dotted`` names, or the one that defines it (``accelkit.plan.time.x`` → ``accelkit.plan.time``)."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _edges(module: str, source: str | None = None) -> list[Edge]:
    """Every import of an accelkit module in ``module``, at module level or inside a function (relative imports
    resolved; ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``); imports under
    ``if TYPE_CHECKING:`` are left out — they never run. ``source``: the module's text (default: its file)."""
    path = MODULES.get(module)
    package = module if path is not None and path.name == "__init__.py" else module.rpartition(".")[0]
    edges: list[Edge] = []

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
        return [f"{base}.{a.name}" for a in node.names]

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.orelse:
                    visit_one(stmt, in_function)
            else:
                visit_one(child, in_function)

    def visit_one(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in targets(node):
                target = _module_of(name) if name.startswith("accelkit.") else None
                if target is not None and target != module:
                    edges.append(Edge(module, target, node.lineno, node.end_lineno or node.lineno, in_function))
        visit(node, in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(ast.parse(source if source is not None else MODULES[module].read_text()), False)
    return edges


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_imports_inside_functions_and_relative_ones_and_skips_type_checking():
    source = """
from typing import TYPE_CHECKING
from accelkit.plan import flops
from . import time as plan_time
import torch
if TYPE_CHECKING:
    from accelkit.plan.context import PlanContext

def f():
    from .memory import ACT_BYTES, optimizer_bytes_per_param
    import accelkit.plan.search
"""
    edges = {(e.target, e.line, e.in_function) for e in _edges("accelkit.plan.api", source)}
    assert edges == {("accelkit.plan.flops", 3, False), ("accelkit.plan.time", 4, False),
                     ("accelkit.plan.memory", 10, True), ("accelkit.plan.search", 11, True)}


def test_no_import_circle_inside_a_package():
    """No group of modules imports one another around a circle — counting imports inside functions, which still
    tie the modules together: the fix is a shared lower module or the package's edge, not a hidden import."""
    edges = {m: _edges(m) for m in MODULES}
    graph = {m: {e.target for e in es} for m, es in edges.items()}
    report = []
    for component in _cycles(graph):
        members = set(component)
        report.append("circle: " + ", ".join(component))
        report += list(dict.fromkeys(  # one line per import statement
            f"  {e.source}:{e.line} imports {e.target}" + (" (inside a function)" if e.in_function else "")
            for m in component for e in edges[m] if e.target in members))
    assert not report, "\n".join(report)


def _comment_lines(source: str) -> set[int]:
    return {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT}


def _silent_imports(module: str, source: str) -> list[int]:
    """Lines of ``module``'s imports of accelkit modules inside a function with no comment on their line or the line
    above (above a run of imports, the comment covers the run)."""
    lines = source.splitlines()
    comments = _comment_lines(source)
    silent = []
    for edge in {e.line: e for e in _edges(module, source) if e.in_function}.values():  # one per statement
        if comments & set(range(edge.line, edge.end_line + 1)):
            continue
        above = edge.line - 1
        while above > 0 and lines[above - 1].lstrip().startswith(("import ", "from ")) and above not in comments:
            above -= 1  # the run of imports this one belongs to
        if above not in comments:
            silent.append(edge.line)
    return sorted(silent)


def test_the_reason_check_finds_a_silent_import():
    source = """
def f():
    # lazy: recipes import torch
    import torch
    from accelkit.recipes import apply
    from accelkit.recipes.gates import drift  # (the run's comment covers it too)


def g():
    x = 1
    from accelkit.recipes import apply
    from accelkit.plan import flops  # lazy: a reason of its own
"""
    assert _silent_imports("accelkit.bench.variants", source) == [11]


def test_every_import_of_accelkit_inside_a_function_says_why():
    """A function-level import of our own module hides an edge of the graph from a reader: each says why it is
    lazy (pulls torch, keeps a command's start-up fast, an optional dependency) in a comment on its line or the
    line above it (above a run of imports, the comment covers the run)."""
    silent = [f"{path.relative_to(ROOT.parent)}:{line}: {path.read_text().splitlines()[line - 1].strip()}"
              for module, path in sorted(MODULES.items()) for line in _silent_imports(module, path.read_text())]
    assert not silent, "say why each is lazy, or move it to the top:\n" + "\n".join(silent)
