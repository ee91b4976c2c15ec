"""No import cycle spans two apps (issue 18). import-linter's contracts (pyproject.toml, run by scripts/test.sh) forbid
the known wrong directions; this also catches a cycle between two apps neither contract names, e.g. evolution and
frontend importing each other. The graph is grimp's (what import-linter reads): every import, including those inside
functions, between the modules of the apps."""

from collections import deque

import grimp
import pytest

APPS = ("clear", "traces", "diagnosis", "evolution", "frontend")


def _app(module: str) -> str:
    return module.split(".")[0]


def import_graph(packages: tuple[str, ...] = APPS) -> dict[str, set[str]]:
    graph = grimp.build_graph(*packages, cache_dir=None)
    return {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, iteratively (a deep import chain must not hit the recursion limit)."""
    nodes = set(edges) | {m for targets in edges.values() for m in targets}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(edges.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
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
                components.append(sorted(component))
    return components


def _cycle_through(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle of the component that crosses apps, as a module path (for the failure message)."""
    members = set(component)
    source, target = next((a, b) for a in component for b in sorted(edges.get(a, ()))
                          if b in members and _app(a) != _app(b))
    came_from = {target: None}
    queue = deque([target])
    while queue:
        node = queue.popleft()
        if node == source:
            break
        for following in sorted(edges.get(node, ())):
            if following in members and following not in came_from:
                came_from[following] = node
                queue.append(following)
    path, node = [], source
    while node is not None:  # back from the source to the target
        path.append(node)
        node = came_from[node]
    return [source] + path[::-1]


def cross_app_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """A cycle for each group of modules that import each other (directly or not) across two or more apps."""
    return [_cycle_through(edges, component) for component in strongly_connected(edges)
            if len({_app(module) for module in component}) > 1]


def test_a_cycle_across_two_apps_is_found_and_one_inside_an_app_is_not():
    edges = {
        "traces.services": {"traces.models", "diagnosis.hook"},  # traces -> diagnosis ...
        "traces.models": {"traces.services"},  # a cycle inside one app: allowed
        "diagnosis.hook": {"diagnosis.models"},
        "diagnosis.models": {"traces.models"},  # ... -> traces: the cycle spans two apps
        "evolution.tasks": {"diagnosis.models"},
    }
    [cycle] = cross_app_cycles(edges)
    assert cycle[0] == cycle[-1]
    assert set(cycle) == {"traces.services", "traces.models", "diagnosis.hook", "diagnosis.models"}
    assert all(b in edges[a] for a, b in zip(cycle, cycle[1:]))  # a real path through the imports

    del edges["diagnosis.models"]
    assert cross_app_cycles(edges) == []


def test_a_long_chain_does_not_hit_the_recursion_limit():
    edges = {f"clear.m{i}": {f"clear.m{i + 1}"} for i in range(5000)}
    edges["clear.m5000"] = {"traces.x"}
    edges["traces.x"] = {"clear.m0"}
    [cycle] = cross_app_cycles(edges)
    assert len(cycle) == 5003


@pytest.mark.parametrize("packages", [APPS])
def test_no_import_cycle_spans_two_apps(packages):
    edges = import_graph(packages)
    assert "traces.services.lifecycle" in edges, "the graph is empty: are the apps importable from here?"
    cycles = cross_app_cycles(edges)
    assert not cycles, "import cycles across apps (break them with an outbox fact, see clear/outbox):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles)


def private_imports_across_apps(root) -> list[tuple[str, str, str]]:
    """(file, module, name) for each `from <other app>... import _name` or import from a private module of another
    app: apps use each other's services and selectors by their public names only."""
    import ast

    found = []
    for path in sorted(root.glob("*/**/*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] not in APPS or "migrations" in relative.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                continue
            if _app(node.module) == relative.parts[0] or _app(node.module) not in APPS:
                continue
            private_module = any(part.startswith("_") and part != "__init__" for part in node.module.split("."))
            found += [(str(relative), node.module, alias.name) for alias in node.names
                      if private_module or alias.name.startswith("_")]
    return found


def test_a_private_name_of_another_app_is_found(tmp_path):
    (tmp_path / "frontend").mkdir()
    (tmp_path / "frontend" / "views.py").write_text(
        "from diagnosis.services import run_start, _helper\nfrom frontend.queries import _own\n")
    assert private_imports_across_apps(tmp_path) == [("frontend/views.py", "diagnosis.services", "_helper")]


def test_apps_use_only_public_names_of_each_other():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert private_imports_across_apps(root) == []
