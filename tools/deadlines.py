"""Test deadlines against their children's: every pytest timeout must outlast what the test waits for.

Usage: python tools/deadlines.py [TESTS_DIR]     (TESTS_DIR defaults to tests/; exits 1 on a finding)

A test that starts a child process and allows it N seconds must itself be allowed more than N by
pytest, or a busy machine kills the test while its child is still within its own limit: the test
then fails for no reason. This reads the test modules with ``ast`` (nothing is imported) and, for
every test function, adds up the limits it waits for:

- ``subprocess.run``/``check_output``/``check_call``/``call`` and ``.communicate(...)`` with
  ``timeout=``;
- calls of functions defined in the same module or imported from a module of ``tests/support/``
  (``from helpers import run_python``, ``from procchild import child``, a module's own
  ``run_script`` wrapper), with their ``timeout`` argument, or the default of their ``timeout``
  parameter;
- calls inside a ``for`` loop over ``range(N)`` or a literal sequence count N times, and a test
  parametrized into several cases counts each case once (each has its own deadline).

Its deadline is the first of ``@pytest.mark.timeout(N)`` on the function, on its class, the
module's ``pytestmark``, or ``timeout`` in pyproject.toml's ``[tool.pytest.ini_options]``. A
finding is a test whose deadline is less than its children's limits plus ``MARGIN`` seconds (the
test's own work around them). Limits that are not literal numbers are not counted.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

MARGIN = 60.0
SUBPROCESS_CALLS = {"run", "check_output", "check_call", "call"}


def ini_timeout(root: Path) -> float:
    """The suite-wide pytest timeout from pyproject.toml (0 when none is set)."""
    text = (root / "pyproject.toml").read_text()
    section = text.split("[tool.pytest.ini_options]", 1)[-1].split("\n[", 1)[0]
    found = re.search(r"^timeout\s*=\s*([0-9.]+)", section, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _number(node: ast.AST | None, bindings: dict[str, float]) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.Name):
        return bindings.get(node.id)
    return None


def _mark_timeout(decorators: list[ast.expr]) -> float | None:
    for deco in decorators:
        for node in ast.walk(deco):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "timeout" and node.args:
                return _number(node.args[0], {})
    return None


def _loop_count(loop: ast.For) -> int:
    it = loop.iter
    if isinstance(it, (ast.Tuple, ast.List, ast.Set)):
        return max(1, len(it.elts))
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and it.args:
        stop = _number(it.args[-1] if len(it.args) == 1 else it.args[1], {})
        start = _number(it.args[0], {}) if len(it.args) > 1 else 0.0
        if stop is not None and start is not None:
            return max(1, int(stop - start))
    return 1


class Budget:
    """Adds up the child limits a function waits for, following calls into known functions."""

    def __init__(self, functions: dict[str, ast.FunctionDef]):
        self.functions = functions

    def of_function(self, fn: ast.FunctionDef, bindings: dict[str, float], depth: int = 0) -> float:
        return self._statements(fn.body, bindings, depth)

    def _statements(self, body: list[ast.stmt], bindings: dict[str, float], depth: int) -> float:
        total = 0.0
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.For):
                total += _loop_count(stmt) * self._statements(stmt.body, bindings, depth) + self._statements(stmt.orelse, bindings, depth)
                continue
            nested = [getattr(stmt, name) for name in ("body", "orelse", "finalbody") if isinstance(getattr(stmt, name, None), list)]
            handlers = getattr(stmt, "handlers", None) or []
            if nested or handlers:
                for child in ast.iter_child_nodes(stmt):
                    if not isinstance(child, ast.stmt) and not isinstance(child, ast.ExceptHandler):
                        total += self._calls(child, bindings, depth)
                for block in nested:
                    total += self._statements(block, bindings, depth)
                for handler in handlers:
                    total += self._statements(handler.body, bindings, depth)
                continue
            total += self._calls(stmt, bindings, depth)
        return total

    def _calls(self, node: ast.AST, bindings: dict[str, float], depth: int) -> float:
        total = 0.0
        for call in ast.walk(node):
            if isinstance(call, ast.Call):
                total += self._call(call, bindings, depth)
        return total

    def _call(self, call: ast.Call, bindings: dict[str, float], depth: int) -> float:
        keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg}
        func = call.func
        if isinstance(func, ast.Attribute) and (
            (func.attr in SUBPROCESS_CALLS and isinstance(func.value, ast.Name) and func.value.id == "subprocess")
            or func.attr == "communicate"
        ):
            return _number(keywords.get("timeout"), bindings) or 0.0
        name = func.id if isinstance(func, ast.Name) else None
        target = self.functions.get(name or "")
        if target is None or depth > 4:
            return 0.0
        params = target.args.args + target.args.kwonlyargs
        defaults = dict(zip([p.arg for p in target.args.args][len(target.args.args) - len(target.args.defaults):], target.args.defaults))
        defaults.update({p.arg: d for p, d in zip(target.args.kwonlyargs, target.args.kw_defaults) if d is not None})
        inner: dict[str, float] = {}
        for param in params:
            value = _number(defaults.get(param.arg), bindings)
            if value is not None:
                inner[param.arg] = value
        for param, arg in zip(target.args.args, call.args):
            value = _number(arg, bindings)
            if value is not None:
                inner[param.arg] = value
        for key, arg in keywords.items():
            value = _number(arg, bindings)
            if value is not None:
                inner[key] = value
        return self.of_function(target, inner, depth + 1)


def _module_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _module_timeout(tree: ast.Module) -> float | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            elements = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            found = _mark_timeout(list(elements))
            if found is not None:
                return found
    return None


def _tests(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            yield node, None
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                    yield item, node


def _support_modules(support: Path) -> dict[str, ast.Module]:
    """The parsed modules of ``tests/support/``, by import name."""
    return {path.stem: ast.parse(path.read_text()) for path in sorted(support.glob("*.py"))} if support.is_dir() else {}


def _imported(tree: ast.Module, modules: dict[str, ast.Module], seen: frozenset[str] = frozenset()) -> dict[str, ast.FunctionDef]:
    """The functions ``tree`` imports from the support ``modules`` (``from helpers import run_python``,
    ``from procdata import *``), under the names it imports them as; each imported module's own functions
    (and what it imports in turn) come along at a lower precedence, for the calls inside them."""
    scope: dict[str, ast.FunctionDef] = {}
    named: dict[str, ast.FunctionDef] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules) or node.module in seen:
            continue
        source = modules[node.module]
        functions = {**_imported(source, modules, seen | {node.module}), **_module_functions(source)}
        scope.update(functions)
        for alias in node.names:
            if alias.name == "*":
                named.update(_module_functions(source))
            elif alias.name in functions:
                named[alias.asname or alias.name] = functions[alias.name]
    return {**scope, **named}


def findings(tests_dir: Path) -> list[str]:
    """One line per test whose pytest deadline does not outlast its children's limits plus MARGIN."""
    default = ini_timeout(tests_dir.parent)
    modules = _support_modules(tests_dir / "support")
    found = []
    for path in sorted(tests_dir.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        budget = Budget({**_imported(tree, modules), **_module_functions(tree)})
        module_limit = _module_timeout(tree)
        for fn, cls in _tests(tree):
            deadline = _mark_timeout(fn.decorator_list)
            if deadline is None and cls is not None:
                deadline = _mark_timeout(cls.decorator_list)
            if deadline is None:
                deadline = module_limit if module_limit is not None else default
            children = budget.of_function(fn, {})
            if children and deadline and deadline < children + MARGIN:
                found.append(f"{path.relative_to(tests_dir)}:{fn.lineno} {fn.name}: pytest allows {deadline:g} s, its children {children:g} s (+{MARGIN:g} s margin)")
    return found


def main(argv: list[str]) -> int:
    tests_dir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "tests"
    rows = findings(tests_dir)
    for row in rows:
        print(row)
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
