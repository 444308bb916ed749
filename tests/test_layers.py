"""The layers of DESIGN section 11, read from the code's own imports (inside functions
too; ``if TYPE_CHECKING:`` blocks, which never run, left out): no cycle; the rule
modules import nothing that runs a store, a process or a tool; the two dialects never
import each other, the API, the supervisor or the factory; and outside ``store/``,
code reaches a store through the protocol and the factory only.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jobpool"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.pyx")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _import_nodes(tree: ast.AST, eager_only: bool = False):
    """Every import under ``tree``; with ``eager_only``, those that run when the module
    is imported (not inside a function)."""
    for node in ast.iter_child_nodes(tree):
        if _type_checking(node):
            children: list[ast.AST] = list(node.orelse)   # the branch that runs
        elif eager_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        else:
            children = [node]
        for child in children:
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            yield from _import_nodes(child, eager_only)


def _source(path: Path) -> str:
    text = path.read_text()
    if path.suffix != ".pyx":
        return text
    # The compiled module's Python-level imports (whole, parentheses and all); its
    # cdef lines are not Python.
    kept, open_parens = [], 0
    for line in text.splitlines():
        if open_parens or (line.startswith(("import ", "from ")) and " cimport " not in line):
            kept.append(line)
            open_parens += line.count("(") - line.count(")")
    return "\n".join(kept)


def imports_of(name: str, eager_only: bool = False) -> set[str]:
    """The ``jobpool`` modules ``name`` imports, each named as the module that defines
    what it takes (``from jobpool.store import rows`` is ``jobpool.store.rows``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _import_nodes(ast.parse(_source(path)), eager_only):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")[:len(package.split(".")) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        for alias in node.names:
            submodule = f"{module}.{alias.name}"
            found.add(submodule if submodule in MODULES else module)
    return {m for m in found if m == "jobpool" or m.startswith("jobpool.")}


GRAPH = {name: imports_of(name) for name in MODULES}
#: What importing each module loads at once (imports inside functions left out).
EAGER = {name: imports_of(name, eager_only=True) for name in MODULES}


def _cycles() -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(GRAPH[node]):
            if other not in GRAPH:
                continue
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for name in sorted(GRAPH):
        if name not in index:
            visit(name)
    return found


def _offending(importers, forbidden) -> dict[str, list[str]]:
    bad = {}
    for name in sorted(MODULES):
        if not importers(name):
            continue
        wrong = sorted(m for m in GRAPH[name] if forbidden(name, m))
        if wrong:
            bad[name] = wrong
    return bad


def _in(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_walk_sees_imports_inside_functions_and_through_a_package():
    # What the rules below rely on: an import inside a function counts, and a
    # module taken from its package counts as that module.
    assert "jobpool.store.sqlite.store" in GRAPH["jobpool.store.factory"]   # inside connect()
    assert "jobpool.store.rows" in GRAPH["jobpool.store.batch_store"]       # from-import
    assert "jobpool._core" in GRAPH["jobpool.core"]                          # a compiled module


def test_no_module_imports_itself_back_through_others():
    assert _cycles() == []


#: The rule modules: what a job's life, its limits and its claim order are, as values.
RULES = ("jobpool.lifecycle", "jobpool.limits", "jobpool.queueplan", "jobpool.bounds",
         "jobpool.options", "jobpool.liveness", "jobpool.errors")
#: What runs a store, a process, a tool or an interface.
RUNNERS = ("jobpool.store", "jobpool.supervisor", "jobpool.core", "jobpool._core",
           "jobpool._core_py", "jobpool.child", "jobpool.forked", "jobpool.cli",
           "jobpool.dashboard", "jobpool.web", "jobpool.jobs", "jobpool.handles",
           "jobpool.testing", "jobpool.metrics")


def test_the_rule_modules_import_no_store_process_or_tool():
    assert _offending(lambda n: n in RULES, lambda _n, m: _in(m, *RUNNERS)) == {}


DIALECTS = ("jobpool.store.sqlite", "jobpool.store.postgres")
#: The engine: the job's life on the hot path, once, over a driver (DESIGN section 11).
ENGINE = ("jobpool.engine",)


def test_the_engine_names_no_dialect_nor_a_database_module():
    def forbidden(_name: str, module: str) -> bool:
        return _in(module, *DIALECTS, "jobpool.store.factory", "jobpool.core",
                   "jobpool._core", "jobpool._core_py", "jobpool.supervisor")
    assert _offending(lambda n: n in ENGINE, forbidden) == {}
    databases = set()
    for name in ENGINE:
        for node in _import_nodes(ast.parse(_source(MODULES[name]))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""])
            databases.update(n for n in names if n.split(".")[0] in ("sqlite3", "psycopg"))
    assert databases == set()


def test_the_dialects_never_import_each_other_the_api_the_supervisor_or_the_factory():
    def forbidden(name: str, module: str) -> bool:
        other = [d for d in DIALECTS if not _in(name, d)]
        return _in(module, *other, "jobpool.store.factory", "jobpool.supervisor",
                   "jobpool.jobs", "jobpool.cli", "jobpool.dashboard", "jobpool.web") \
            or module == "jobpool"
    assert _offending(lambda n: _in(n, *DIALECTS), forbidden) == {}


#: Outside ``store/``, what may name a dialect: the SQLite driver's compiled module and
#: its pure twin (the claim/settle core), and applications built on the library.
DRIVER = ("jobpool._core", "jobpool._core_py", "jobpool.core")
APPLICATIONS = ("jobpool.examples",)
#: What a dialect offers to be named without loading its store: SQLite's opening options.
NAMED_WITHOUT_LOADING = ("jobpool.store.sqlite.options",)


def test_outside_the_store_a_store_is_reached_through_the_protocol_and_the_factory():
    def outside(name: str) -> bool:
        return not _in(name, "jobpool.store", *DRIVER, *APPLICATIONS)
    assert _offending(outside, lambda _n, m: _in(m, *DIALECTS)
                      and not _in(m, *NAMED_WITHOUT_LOADING)) == {}


def test_a_child_loads_no_store_module_but_the_row_codec():
    # R43: a child never opens the store; what it runs arrives over its pipe. (A job
    # that enqueues opens the default store through the factory when it does.)
    # Importing a module runs its packages' ``__init__`` first: those count too.
    reached, todo = set(), ["jobpool.child"]
    while todo:
        name = todo.pop()
        if name in reached or name not in EAGER:
            continue
        reached.add(name)
        todo.extend(EAGER[name])
        todo.extend(name.rsplit(".", depth)[0] for depth in range(1, name.count(".") + 1))
    assert "jobpool.lifecycle" in reached
    stores = {m for m in reached if _in(m, "jobpool.store")}
    assert stores <= {"jobpool.store.row_codec"}, sorted(stores)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_import_names_a_module_that_exists(name):
    # A rename that left an import behind would make the walk above see nothing.
    assert {m for m in GRAPH[name] if m not in MODULES} == set()
