"""The package's dependencies point one way: the kinds of pool use the core and the adapter, the core and the
adapter never name a kind (the contracts in setup.cfg), no module imports itself through others, and nothing
dodges a circle by importing late (nor does any module of the tests or the benchmarks import below code)."""

import ast
import os
import pathlib
import re
import subprocess
import sys

import grimp

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "metal3_ipam"


def test_the_import_contracts_hold():
    run = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                          "lint_imports_command()", "--config", str(ROOT / "setup.cfg"), "--no-cache"],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
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


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph("metal3_ipam", cache_dir=None)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle():
    class Circle:
        modules = {"a", "b", "c"}

        @staticmethod
        def find_modules_directly_imported_by(module):
            return {"a": {"b"}, "b": {"c"}, "c": {"a"}}[module]
    assert _cycles(Circle) == [["a", "b", "c"]]


def test_nothing_dodges_a_circle_by_importing_late():
    late = re.compile(r"noqa: [^\n]*E40[2]|^def __getattr__\(", re.M)
    offenders = [str(path.relative_to(ROOT)) for path in _sources() if late.search(path.read_text())]
    assert offenders == []


def _late_imports(tree: ast.Module) -> list[int]:
    """The lines of the module-level imports that follow anything but the docstring and other imports."""
    late, begun = [], False
    for at, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if begun:
                late.append(node.lineno)
        elif not (at == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            begun = True
    return late


def test_every_module_imports_at_its_top():
    """No import below code in the package, the tests or the benchmarks (pycodestyle's E402): an order of
    imports that matters (a path put first, an environment set first) is done by how a module is run, a
    fixture or the conftest.py above, not by code between imports."""
    offenders = {str(path.relative_to(ROOT)): lines for path in _sources()
                 if (lines := _late_imports(ast.parse(path.read_text())))}
    assert offenders == {}


def test_a_late_import_is_found():
    assert _late_imports(ast.parse('"""doc"""\nimport a\nX = 1\nfrom b import c\n')) == [4]
    assert _late_imports(ast.parse('"""doc"""\nfrom __future__ import annotations\nimport a\n')) == []


def _sources() -> list[pathlib.Path]:
    return sorted(path for top in ("metal3_ipam", "tests", "bench") for path in (ROOT / top).rglob("*.py"))


def test_every_name_the_package_uses_is_defined():
    """pyflakes finds no undefined name in the package (a name a refactor left behind fails only when its line
    runs)."""
    run = subprocess.run([sys.executable, "-m", "pyflakes", str(PACKAGE)], capture_output=True, text=True)
    undefined = [line for line in run.stdout.splitlines() if "undefined name" in line]
    assert run.stderr == "" and undefined == []
