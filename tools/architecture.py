"""Layout figures for the slipstream sources, computed with ``ast`` only (nothing is imported).

Usage: python tools/architecture.py [SRC_DIR] [--list]      (SRC_DIR defaults to src/slipstream)

A *module* is a .py file under SRC_DIR (``__init__.py`` stands for its package); its *package*
is its directory relative to SRC_DIR ("" for the root, "torch", "loading/backends", ...).
Files that fail to parse are reported and left out of figures 2 and 3. ``--list`` prints every
finding as file:line and the code.

1. Long files: .py and .c files with more than 400 lines (newline count); also the number of
   modules and the largest file.
2. Lazy own-module imports: ``import``/``from ... import`` statements inside a function, method
   or class body that import the package's own code (relative, or absolute ``slipstream`` /
   ``slipstream.*``). Statements under a top-level ``if``/``try`` (``if TYPE_CHECKING:``) are top
   level. Informational: other imports inside function/class bodies, split into third-party
   (optional dependencies such as torch, numba, pyarrow) and standard library.
3. Cross-package private accesses, two kinds:
   a. imports of a single-underscore, non-dunder name (``from X import _n``, ``import X._n``)
      from a module X in another package than the importer's. The name may be a submodule
      (``from .. import _imaging``), marked [submodule]. Informational: imports of
      underscore-named modules from another package (``from .._loader import DataLoader``),
      whatever the imported name.
   b. attribute accesses ``expr._n`` (``expr`` not the bare name ``self``/``cls``) of a private
      name the package defines (``self._n =``/``cls._n =``, ``def _n``, ``class _n``, module- or
      class-level ``_n =``, ``global _n``, ``__slots__`` entries, module-level ``import x as _n``,
      underscore module files) when every definition of ``_n`` is in another package. Names
      also defined in the accessing package are "ambiguous"; names the package never defines
      (``torch.utils.data._utils``) are "third-party privates".
   Cross-module private accesses: the same rules with module in place of package.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LIMIT = 400
Finding = tuple[str, int, str]  # (file, line, text)


@dataclass
class Module:
    rel: str  # path relative to SRC_DIR
    name: str  # dotted name
    pkg: str  # package directory relative to SRC_DIR ("" for the root)
    tree: ast.Module
    lines: list[str]


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def scoped(node: ast.AST, scope: str = "module") -> Iterator[tuple[ast.AST, str]]:
    """Yield (node, scope) for every node; scope is the innermost enclosing module/class/function."""
    for child in ast.iter_child_nodes(node):
        yield child, scope
        func = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from scoped(child, "function" if func else "class" if isinstance(child, ast.ClassDef) else scope)


class Layout:
    def __init__(self, src: Path) -> None:
        self.src, self.root = src, src.name
        self.sizes: list[tuple[int, str]] = []
        self.broken: list[Finding] = []
        self.mods: dict[str, Module] = {}
        self.f: dict[str, list[Finding]] = defaultdict(list)
        self.where: dict[str, str] = {}  # dotted module name (extensions too) -> package directory
        for p in sorted(src.rglob("*")):
            if p.suffix not in (".py", ".c", ".so", ".pyd") or "__pycache__" in p.parts or not p.is_file():
                continue
            rel, pkg = p.relative_to(src).as_posix(), p.parent.relative_to(src).as_posix().strip(".")
            parts = [self.root, *p.parent.relative_to(src).parts, p.name.split(".")[0]]
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            self.where[".".join(parts)] = pkg
            if p.suffix in (".so", ".pyd"):
                continue
            try:
                text = p.read_text(encoding="utf-8")
                self.sizes.append((text.count("\n") + (bool(text) and not text.endswith("\n")), rel))
                if p.suffix == ".py":
                    self.mods[".".join(parts)] = Module(rel, ".".join(parts), pkg, ast.parse(text, rel), text.splitlines())
            except (SyntaxError, ValueError) as e:  # UnicodeDecodeError is a ValueError
                self.broken.append((rel, getattr(e, "lineno", 0) or 0, f"{type(e).__name__}: {e}"))
        self.defs: dict[str, set[tuple[str, str]]] = defaultdict(set)  # name -> {(pkg, module)}
        for dotted, pkg in self.where.items():  # underscore module files define their names
            self.defs[dotted.rsplit(".", 1)[-1]].add((pkg, dotted))
        for m in self.mods.values():
            self.collect_defs(m)
        for m in self.mods.values():
            self.scan(m)

    def pkg_of(self, dotted: str) -> str | None:
        """Package directory of a dotted module name, or None when it is not in the tree."""
        if dotted in self.where or dotted == self.root:
            return self.where.get(dotted, "")
        parts = dotted.split(".")[1:]
        return "/".join(parts) if parts and (self.src.joinpath(*parts)).is_dir() else None

    def collect_defs(self, m: Module) -> None:
        names: list[str] = []
        for node, scope in scoped(m.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names += [node.name] if scope != "function" else []
            elif isinstance(node, ast.Global):
                names += node.names
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and scope == "module":
                names += [a.asname for a in node.names if a.asname]  # `import x as _x` makes a name
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for e in ast.walk(t):
                        if not isinstance(getattr(e, "ctx", None), ast.Store):
                            continue
                        if isinstance(e, ast.Attribute) and is_self(e.value):
                            names.append(e.attr)
                        elif isinstance(e, ast.Name) and scope != "function":
                            names.append(e.id)
                            if e.id == "__slots__" and scope == "class" and node.value is not None:
                                names += [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
        for n in names:
            self.defs[n].add((m.pkg, m.name))

    def add(self, kind: str, m: Module, node: ast.AST, note: str = "", text: str = "") -> None:
        text = text or (ast.unparse(node) if isinstance(node, ast.stmt) else m.lines[node.lineno - 1].strip())
        self.f[kind].append((m.rel, node.lineno, text[:120] + note))

    def private_import(self, m: Module, node: ast.stmt, base: str, name: str, text: str) -> None:
        """`name` taken from own module `base` (3a, cross-module, underscore-module findings)."""
        is_sub = self.pkg_of(f"{base}.{name}") is not None
        if private(name):
            note = "  [submodule]" if is_sub else ""
            if self.pkg_of(base) != m.pkg:
                self.add("3a cross-package private imports", m, node, note, text)
            if base != m.name:
                self.add("cross-module private imports", m, node, note, text)
        target = f"{base}.{name}" if is_sub else base
        k = "underscore-module imports across packages"
        if any(map(private, target.split(".")[1:])) and self.pkg_of(target) != m.pkg \
                and (m.rel, node.lineno, ast.unparse(node)) not in self.f[k]:  # once per statement
            self.add(k, m, node)

    def scan_import(self, m: Module, node: ast.Import | ast.ImportFrom, lazy: bool) -> None:
        here = m.name.split(".")[:None if m.rel.endswith("__init__.py") else -1]
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif node.level > len(here):  # above the top package: reported as unresolved
            targets = [f"{self.root}.<above the top>"]
        elif node.level:
            targets = [".".join(here[:len(here) - node.level + 1] + [node.module or ""]).rstrip(".")]
        else:
            targets = [node.module or ""]
        own = [t for t in targets if t.split(".")[0] == self.root]
        if lazy:
            std = targets[0].split(".")[0] in sys.stdlib_module_names
            self.add("2 lazy own-module imports" if own else f"{'stdlib' if std else 'third-party'} imports inside functions", m, node)
        names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
        if not own and any(private(p) for p in ".".join(targets + names).split(".")):
            self.add("third-party private accesses", m, node)
        for t in own:
            if self.pkg_of(t) is None:
                self.add("unresolved own imports", m, node)
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    text = ast.unparse(ast.ImportFrom(node.module, [a], node.level))
                    self.private_import(m, node, t, a.name, text)
            elif any(map(private, parts := t.split("."))):
                i = next(i for i, p in enumerate(parts) if private(p))
                self.private_import(m, node, ".".join(parts[:i]), parts[i], f"import {t}")

    def scan(self, m: Module) -> None:
        for node, scope in scoped(m.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.scan_import(m, node, scope != "module")
            elif isinstance(node, ast.Attribute) and private(node.attr) and not is_self(node.value):
                where, note = self.defs.get(node.attr), f"  [{node.attr}]"
                if not where:
                    self.add("third-party private accesses", m, node, note)
                    continue
                for level, mine, homes in (("package", m.pkg, {w[0] for w in where}),
                                           ("module", m.name, {w[1] for w in where})):
                    if mine not in homes:
                        kind = "3b cross-package" if level == "package" else "cross-module"
                        self.add(f"{kind} private attribute accesses", m, node, note)
                    elif len(homes) > 1:
                        self.add(f"ambiguous {level} private attribute accesses", m, node, note)


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--list"]
    src = Path(args[0]) if args else Path(__file__).resolve().parent.parent / "src" / "slipstream"
    if not src.is_dir():
        print(f"no such directory: {src}", file=sys.stderr)
        return 2
    lay = Layout(src.resolve())

    def n(k: str) -> str:
        subs = sum(t.endswith("[submodule]") for *_, t in lay.f[k])
        return f"{len(lay.f[k])}" + (f" ({subs} of submodules)" if k.endswith("private imports") else "")

    long, big = sorted((s for s in lay.sizes if s[0] > LIMIT), reverse=True), max(lay.sizes, default=(0, "-"))
    print(f"Layout of {src}: {len(lay.mods)} modules parsed, {len(lay.broken)} unparsable, "
          f"{sum(r.endswith('.c') for _, r in lay.sizes)} .c; largest file {big[1]} ({big[0]} lines)")
    print(f"1. files over {LIMIT} lines: {len(long)}: " + ", ".join(f"{r} {c}" for c, r in long))
    print(f"2. lazy own-module imports: {n('2 lazy own-module imports')}   (informational, inside functions: "
          f"third-party {n('third-party imports inside functions')}, stdlib {n('stdlib imports inside functions')})")
    a, b = len(lay.f["3a cross-package private imports"]), len(lay.f["3b cross-package private attribute accesses"])
    print(f"3. cross-package private accesses: {a + b} = a. imports {n('3a cross-package private imports')} + b. "
          f"attribute accesses {b};   ambiguous {n('ambiguous package private attribute accesses')}")
    print(f"   informational: underscore-module imports across packages {n('underscore-module imports across packages')}"
          f", third-party privates {n('third-party private accesses')}, unresolved own imports "
          f"{n('unresolved own imports')}\n   cross-module private accesses: imports {n('cross-module private imports')}"
          f" + attribute accesses {n('cross-module private attribute accesses')};   ambiguous "
          f"{n('ambiguous module private attribute accesses')}")
    for rel, line, err in lay.broken:
        print(f"   unparsable: {rel}:{line}: {err}")
    for kind in sorted(lay.f) if "--list" in argv else []:
        print(f"\n== {kind} ({len(lay.f[kind])})")
        for rel, line, text in sorted(lay.f[kind]):
            print(f"{rel}:{line}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
