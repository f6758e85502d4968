"""The package layering of docs/architecture.md, checked on the real import graph (module-level imports and
those inside functions): a package imports only packages in lower layers, so there is no cycle."""

import ast
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
