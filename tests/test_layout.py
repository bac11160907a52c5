"""The package layout's rules (docs/architecture.md, Package rules): the pieces a deployment
runs never import the simulators or the experiments, the client never imports the server,
the systems never import the federation layer, and no two packages import each other."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "fedrank"
#: Packages that must not import ``simulation`` or ``experiments``.
DEPLOYED = (
    "server", "client", "core", "models", "aggregators", "optim", "estimators", "privacy",
    "strategies", "systems", "federation", "data", "losses", "metrics", "retrieval",
    "identity",
)  # fmt: skip


def _imports() -> dict[str, set[tuple[str, str]]]:
    """``package -> {(imported package, file)}`` over every module of ``src/fedrank``."""
    edges: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path in SRC.rglob("*.py"):
        package = path.relative_to(SRC).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "fedrank" and len(parts) > 1 and parts[1] != package:
                    edges[package].add((parts[1], str(path.relative_to(SRC))))
    return edges


def test_deployed_packages_never_import_the_simulators_or_experiments() -> None:
    edges = _imports()
    bad = sorted(
        (package, target, where)
        for package in DEPLOYED
        for target, where in edges[package]
        if target in ("simulation", "experiments")
    )
    assert not bad, f"imports of simulation/experiments from deployed packages: {bad}"


def test_the_client_never_imports_the_server() -> None:
    bad = sorted(where for target, where in _imports()["client"] if target == "server")
    assert not bad, f"the client imports the server in {bad}"


def test_the_systems_never_import_the_federation_layer() -> None:
    """The registry lists the systems; a system knows nothing of the registry or the loop
    that drives it (docs/architecture.md, Package rules)."""
    bad = sorted(where for target, where in _imports()["systems"] if target == "federation")
    assert not bad, f"systems import the federation layer in {bad}"


def test_no_package_cycles() -> None:
    """No chain of imports leads from a package back to itself."""
    edges = {p: {t for t, _ in e if t != "errors"} for p, e in _imports().items()}

    def reaches(start: str) -> set[str]:
        seen: set[str] = set()
        stack = list(edges.get(start, ()))
        while stack:
            package = stack.pop()
            if package not in seen:
                seen.add(package)
                stack.extend(edges.get(package, ()))
        return seen

    cyclic = sorted(p for p in edges if p in reaches(p))
    assert not cyclic, f"packages on an import cycle: {cyclic}"


#: A module over this many lines, or a class over :data:`MAX_CLASS_LINES`, does two jobs.
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 400


def test_no_module_or_class_does_two_jobs() -> None:
    """No module in ``src/fedrank`` longer than 800 lines, no class longer than 400."""
    long = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        where = str(path.relative_to(SRC))
        if text.count("\n") > MAX_MODULE_LINES:
            long.append(f"{where}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    long.append(f"{where}: class {node.name}, {size} lines")
    assert not long, long
