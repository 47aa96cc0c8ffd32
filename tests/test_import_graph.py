"""The house's rules, read from the installed package's import graph (issue 13): no import
cycles, the pure core (processors/, schemas/) never reaches for an adapter (streams/,
sinks/), and a publisher or an HTTP client does not load the embedded engines."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

PACKAGES = ("agentlog.processors", "agentlog.schemas", "agentlog.sinks", "agentlog.streams", "agentlog.bench",
            "agentlog.client")  # fmt: skip
CORE = ("agentlog.processors", "agentlog.schemas")
ADAPTERS = ("agentlog.streams", "agentlog.sinks", "agentlog.bench", "agentlog.client")


def _package(module: str) -> str:
    """``agentlog.streams`` for ``agentlog.streams.kafka.app``."""
    return ".".join(module.split(".")[:2])


def _sources() -> dict[str, Path]:
    """Every module of the installed packages, by dotted name."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        for folder in spec.submodule_search_locations:
            for path in Path(folder).rglob("*.py"):
                parts = path.relative_to(folder).with_suffix("").parts
                parts = parts[:-1] if parts[-1] == "__init__" else parts
                modules[".".join((package, *parts))] = path
    return modules


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(path: Path) -> set[str]:
    """The project modules ``path`` imports at run time, at module level or deferred into a
    function (an import under ``if TYPE_CHECKING:`` is for type hints only)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {name for name in found if _package(name) in PACKAGES}


def _graph() -> dict[str, set[str]]:
    modules = _sources()
    return {name: {d for d in _imports(path) if d in modules} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_pure_core_never_imports_an_adapter() -> None:
    reaching_out = sorted(
        (module, dep) for module, deps in _graph().items() if _package(module) in CORE
        for dep in deps if _package(dep) in ADAPTERS
    )  # fmt: skip
    assert reaching_out == []


def test_the_store_interfaces_depend_on_the_schemas_alone() -> None:
    """``sinks/base.py`` names persisted forms (``schemas/``), never the core's machinery."""
    assert {_package(dep) for dep in _graph()["agentlog.sinks.base"]} <= {"agentlog.schemas"}


def _loads(module: str) -> set[str]:
    probe = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return {name.split(".")[0] for name in out.stdout.split()}


def test_the_publishers_and_the_http_client_load_neither_chdb_nor_tantivy() -> None:
    for module in ("agentlog.streams.kafka.publisher", "agentlog.streams.embedded.publisher", "agentlog.streams.api.client",
                   "agentlog.client"):  # fmt: skip
        assert {"chdb", "tantivy"} & _loads(module) == set(), module
