"""The layout rules of the slipstream sources, checked with ``ast`` only (nothing is imported).

Usage: python tools/architecture.py [SRC_DIR] [--list]      (SRC_DIR defaults to src/slipstream)

Exit status: 0 when no rule below has a finding, 1 when one has (or a file does not parse), 2 when
SRC_DIR is not a directory. Findings are printed as ``file:line: text`` (paths relative to SRC_DIR);
``--list`` adds every informational item the same way.

Terms. A *module* is a .py file under SRC_DIR, named by its dotted name without the top package
(``files.packed``; ``__init__.py`` stands for its package, the top one is ``slipstream``). Its
*package* is its directory relative to SRC_DIR (``files``, ``images/device``: a subpackage is a package
of its own); the *root* package is SRC_DIR itself (``__init__.py`` and the root modules ``fields.py``,
``ops.py``, ``gpu.py``, ``jax.py``, ``__main__.py``). An *own import* is an ``import`` or
``from ... import`` of the package's own code (relative, or absolute ``slipstream``/``slipstream.*``);
``from X import n`` imports the module ``X.n`` when there is one, else ``X``. An import is *lazy* when
it is inside a function (methods and lambdas too); imports in a class body or under a top-level
``if``/``try`` run when the module is imported and are top level, except those under
``if TYPE_CHECKING:``, which never run: they are no edges. The *import graph* has an edge for each
top-level own import, and for each lazy own import without a cycle comment (rule 5). Importing
``X.a.b`` also runs the ``__init__`` of each package of ``X.a.b`` that does not hold the importer:
the module graph has those edges too.

Rules (each finding fails the run):
1. No package cycle: the package graph (an edge from the importer's package to the imported
   module's package, when they differ; the root is no node) has no cycle. Each cycle is printed as a
   path with the import statements of each step. The root may import anything, but an import of the
   root (``slipstream`` itself or a root module) from inside a package is a finding: the root is the
   public face.
2. No file circle: the module graph has no cycle (printed the same way).
3. No private name across packages, two kinds:
   a. imports of a single-underscore, non-dunder name (``from X import _n``, ``import X._n``)
      from a module X in another package than the importer's. The name may be a submodule
      (``from .. import _imaging``), marked [submodule].
   b. attribute accesses ``expr._n`` (``expr`` not the bare name ``self``/``cls``) of a private
      name the package defines (``self._n =``/``cls._n =``, ``def _n``, ``class _n``, module- or
      class-level ``_n =``, ``global _n``, ``__slots__`` entries, module-level ``import x as _n``,
      underscore module files) when every definition of ``_n`` is in another package.
4. No module name used twice: two .py files (``__init__.py`` aside) with the same file name.
5. No lazy own import except where it breaks a real cycle, with a comment saying which: a lazy
   own import needs a comment containing "cycle" on one of its lines or on a comment line just above
   (``# lazy: breaks the cycle files.packed -> images.mapfields -> files.packed``), and the cycle
   must exist: what it imports leads back, through the import graph, to the importer's module, or
   (from another package) to the importer's package in the package graph. A lazy import that
   carries the comment is no edge of that graph, so two lazy imports that break one cycle only
   together are both reported. A finding without a comment says whether the import would close a
   cycle, or which third-party modules its laziness keeps from being imported.
6. Long files are questions, not findings: .py and .c files over 600 lines are printed with a "?".

Informational (never fails): lazy own imports that break a cycle (with the cycle); other imports
inside functions, split into third-party (optional dependencies such as torch, pyarrow) and
standard library; underscore-module imports across packages (``from .._loader import DataLoader``);
names the package never defines (``torch.utils.data._utils``: "third-party privates"); private
attribute names also defined in the accessing package ("ambiguous"); own imports that resolve to no
file ("unresolved"); and cross-module private accesses (rule 3 with module in place of package).
"""
from __future__ import annotations

import ast
import io
import itertools
import sys
import tokenize
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

LONG = 600  # lines: a longer file is a question (rule 6)
Finding = tuple[str, int, str]  # (file, line, text)
Site = tuple[str, int, str]  # an edge's import statement: (file, line, note)

PACKAGE_CYCLES = "1 package cycles"
ROOT_IMPORTS = "1 package imports of the root"
MODULE_CYCLES = "2 module cycles"
PRIVATE_IMPORTS = "3a cross-package private imports"
PRIVATE_ATTRIBUTES = "3b cross-package private attribute accesses"
TWICE = "4 module names used twice"
NO_COMMENT = "5 lazy own imports without a cycle comment"
NO_CYCLE = "5 lazy own imports whose cycle does not exist"
UNPARSABLE = "unparsable files"
RULES = (PACKAGE_CYCLES, ROOT_IMPORTS, MODULE_CYCLES, PRIVATE_IMPORTS, PRIVATE_ATTRIBUTES, TWICE, NO_COMMENT, NO_CYCLE,
         UNPARSABLE)
BREAKS = "lazy own imports that break a cycle"


@dataclass
class Module:
    rel: str  # path relative to SRC_DIR
    name: str  # dotted name
    pkg: str  # package directory relative to SRC_DIR ("" for the root)
    tree: ast.Module
    lines: list[str]
    comments: dict[int, str] = field(default_factory=dict)  # line -> its comment
    third: set[str] = field(default_factory=set)  # third-party top-level modules it imports at top level


@dataclass
class Import:
    """One own import statement: the modules it loads and how."""

    mod: Module
    node: ast.Import | ast.ImportFrom
    targets: list[str]  # the own modules it names (resolved dotted names)
    lazy: bool  # inside a function
    typing: bool  # under ``if TYPE_CHECKING:``: never runs
    comment: bool  # a "cycle" comment on its lines or the line above

    @property
    def edge(self) -> bool:
        """Whether it is an edge of the import graph."""
        return not self.typing and not (self.lazy and self.comment)


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                                         or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def scoped(node: ast.AST, scope: str = "module", typing: bool = False) -> Iterator[tuple[ast.AST, str, bool]]:
    """Yield (node, scope, typing) for every node: scope is the innermost enclosing module/class/function,
    typing whether it is in the body of an ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        yield child, scope, typing
        func = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        inner = "function" if func else "class" if isinstance(child, ast.ClassDef) else scope
        yield from scoped(child, inner, typing or is_type_checking(child))


def comments(text: str) -> dict[int, str]:
    found: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                found[tok.start[0]] = tok.string
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def cycles(graph: dict[str, dict[str, list[Site]]]) -> list[list[str]]:
    """The shortest cycle through each edge that lies on one, once each (rotated to start at its least node)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    comp: dict[str, int] = {}
    for start in sorted(graph):  # Tarjan's strongly connected components, iteratively
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            v, succ = work[-1]
            w = next(succ, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    while True:
                        x = stack.pop()
                        comp[x] = index[v]
                        if x == v:
                            break
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                work.append((w, iter(sorted(graph.get(w, {})))))
            elif w in stack and w not in comp:
                low[v] = min(low[v], index[w])
    found: dict[tuple[str, ...], list[str]] = {}
    for u in sorted(graph):
        for v in sorted(graph[u]):
            if u == v or comp.get(u) != comp.get(v):
                continue
            path = shortest(graph, v, {u}, lambda n, c=comp[u]: comp.get(n) == c)
            if path:
                ring = [u, *path[:-1]]
                i = ring.index(min(ring))
                ring = ring[i:] + ring[:i]
                found.setdefault(tuple(ring), ring + [ring[0]])
    return [found[k] for k in sorted(found)]


def shortest(graph: dict[str, dict[str, list[Site]]], start: str, goals: set[str],
             keep: Callable[[str], bool] = lambda n: True) -> list[str]:
    """The shortest path from start to one of goals (start..goal), or [] when there is none."""
    parent: dict[str, str | None] = {start: None}
    todo = deque([start])
    while todo:
        v = todo.popleft()
        if v in goals:
            path = [v]
            while parent[path[-1]] is not None:
                path.append(parent[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for w in sorted(graph.get(v, {})):
            if w not in parent and keep(w):
                parent[w] = v
                todo.append(w)
    return []


def reach(graph: dict[str, dict[str, list[Site]]], starts: Iterable[str]) -> set[str]:
    seen, todo = set(starts), list(starts)
    while todo:
        for w in graph.get(todo.pop(), {}):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


class Layout:
    def __init__(self, src: Path) -> None:
        self.src, self.root = src, src.name
        self.sizes: list[tuple[int, str]] = []
        self.mods: dict[str, Module] = {}
        self.f: dict[str, list[Finding]] = defaultdict(list)
        self.where: dict[str, str] = {}  # dotted module name (extensions too) -> package directory
        self.imports: list[Import] = []
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
                    tree = ast.parse(text, rel)
                    self.mods[".".join(parts)] = Module(rel, ".".join(parts), pkg, tree, text.splitlines(), comments(text))
            except (SyntaxError, ValueError) as e:  # UnicodeDecodeError is a ValueError
                self.f[UNPARSABLE].append((rel, getattr(e, "lineno", 0) or 0, f"{type(e).__name__}: {e}"))
        self.defs: dict[str, set[tuple[str, str]]] = defaultdict(set)  # name -> {(pkg, module)}
        for dotted, pkg in self.where.items():  # underscore module files define their names
            self.defs[dotted.rsplit(".", 1)[-1]].add((pkg, dotted))
        for m in self.mods.values():
            self.collect_defs(m)
        for m in self.mods.values():
            self.scan(m)
        self.module_graph: dict[str, dict[str, list[Site]]] = defaultdict(lambda: defaultdict(list))
        self.package_graph: dict[str, dict[str, list[Site]]] = defaultdict(lambda: defaultdict(list))
        self.graphs()
        self.check_cycles()
        self.check_names()
        self.check_lazy()

    def short(self, dotted: str) -> str:
        return dotted.split(".", 1)[1] if "." in dotted else dotted

    def pkg_of(self, dotted: str) -> str | None:
        """Package directory of a dotted module name, or None when it is not in the tree."""
        if dotted in self.where or dotted == self.root:
            return self.where.get(dotted, "")
        parts = dotted.split(".")[1:]
        return "/".join(parts) if parts and (self.src.joinpath(*parts)).is_dir() else None

    def collect_defs(self, m: Module) -> None:
        names: list[str] = []
        for node, scope, _ in scoped(m.tree):
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
                self.add(PRIVATE_IMPORTS, m, node, note, text)
            if base != m.name:
                self.add("cross-module private imports", m, node, note, text)
        target = f"{base}.{name}" if is_sub else base
        k = "underscore-module imports across packages"
        if any(map(private, target.split(".")[1:])) and self.pkg_of(target) != m.pkg \
                and (m.rel, node.lineno, ast.unparse(node)) not in self.f[k]:  # once per statement
            self.add(k, m, node)

    def resolve(self, dotted: str) -> str | None:
        """The longest prefix of dotted that is a module of the tree."""
        parts = dotted.split(".")
        while parts and ".".join(parts) not in self.mods:
            parts.pop()
        return ".".join(parts) or None

    def scan_import(self, m: Module, node: ast.Import | ast.ImportFrom, lazy: bool, typing: bool) -> None:
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
        if lazy and not own:
            std = targets[0].split(".")[0] in sys.stdlib_module_names
            self.add(f"{'stdlib' if std else 'third-party'} imports inside functions", m, node)
        elif not own and not lazy and not typing:
            m.third.update(t.split(".")[0] for t in targets if t.split(".")[0] not in sys.stdlib_module_names)
        names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
        if not own and any(private(p) for p in ".".join(targets + names).split(".")):
            self.add("third-party private accesses", m, node)
        loaded: list[str] = []
        for t in own:
            if self.pkg_of(t) is None:
                self.add("unresolved own imports", m, node)
                continue
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    text = ast.unparse(ast.ImportFrom(node.module, [a], node.level))
                    self.private_import(m, node, t, a.name, text)
                    loaded.append(f"{t}.{a.name}" if f"{t}.{a.name}" in self.mods else t)
            else:
                if any(map(private, parts := t.split("."))):
                    i = next(i for i, p in enumerate(parts) if private(p))
                    self.private_import(m, node, ".".join(parts[:i]), parts[i], f"import {t}")
                loaded.append(t)
        loaded = list(dict.fromkeys(r for r in map(self.resolve, loaded) if r))
        if own:
            above = node.lineno - (node.lineno > 1 and m.lines[node.lineno - 2].lstrip().startswith("#"))
            comment = any("cycle" in m.comments.get(i, "").lower() for i in range(above, (node.end_lineno or node.lineno) + 1))
            self.imports.append(Import(m, node, loaded, lazy, typing, comment))

    def scan(self, m: Module) -> None:
        for node, scope, typing in scoped(m.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.scan_import(m, node, scope == "function", typing)
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

    def loads(self, imp: Import) -> list[tuple[str, bool]]:
        """(module, implicit) for each module imp runs: its targets, and the __init__ of each of their
        packages that does not hold the importer (those are imported already)."""
        m = imp.mod
        home = m.name if m.rel.endswith("__init__.py") else m.name.rpartition(".")[0]
        out = {t: False for t in imp.targets}
        for t in imp.targets:
            parts = t.split(".")
            for i in range(2, len(parts)):
                p = ".".join(parts[:i])
                if p in self.mods and not (home == p or home.startswith(p + ".")):
                    out.setdefault(p, True)
        return sorted(out.items())

    def graphs(self) -> None:
        for imp in self.imports:
            m, line = imp.mod, imp.node.lineno
            roots = [self.short(t) for t in imp.targets if not self.mods[t].pkg]
            if m.pkg and roots:
                self.add(ROOT_IMPORTS, m, imp.node, f"  (imports {', '.join(roots)}: a package must not import the root)")
            if not imp.edge:
                continue
            note = "lazy" if imp.lazy else ""
            for t, implicit in self.loads(imp):
                if t != m.name:
                    self.module_graph[self.short(m.name)][self.short(t)].append(
                        (m.rel, line, " ".join(filter(None, [note, "runs the __init__" if implicit else ""]))))
                pkg = self.mods[t].pkg
                if not implicit and m.pkg and pkg and pkg != m.pkg:
                    self.package_graph[m.pkg][pkg].append((m.rel, line, note))

    def steps(self, graph: dict[str, dict[str, list[Site]]], path: list[str]) -> str:
        out = []
        for u, v in itertools.pairwise(path):
            sites = sorted(set(graph[u][v]))
            more = f" (+{len(sites) - 1})" if len(sites) > 1 else ""
            note = f" {sites[0][2]}" if sites[0][2] else ""
            out.append(f"{u} -> {v}: {sites[0][0]}:{sites[0][1]}{note}{more}")
        return "; ".join(out)

    def check_cycles(self) -> None:
        for kind, graph in ((PACKAGE_CYCLES, self.package_graph), (MODULE_CYCLES, self.module_graph)):
            for path in cycles(graph):
                rel, line, _ = min(graph[path[0]][path[1]])
                self.f[kind].append((rel, line, f"cycle {' -> '.join(path)}   [{self.steps(graph, path)}]"))

    def check_names(self) -> None:
        homes: dict[str, list[str]] = defaultdict(list)
        for m in self.mods.values():
            if not m.rel.endswith("__init__.py"):
                homes[m.rel.rpartition("/")[2]].append(m.rel)
        for name, rels in sorted(homes.items()):
            for rel in rels if len(rels) > 1 else []:
                self.f[TWICE].append((rel, 1, f"{name} also at {', '.join(r for r in rels if r != rel)}"))

    def third_party(self, starts: Iterable[str]) -> set[str]:
        """The third-party modules imported at top level by starts and the modules they import at top level."""
        top: dict[str, dict[str, list[Site]]] = defaultdict(dict)
        for u, succ in self.module_graph.items():
            top[u] = {v: s for v, s in succ.items() if any("lazy" not in n for *_, n in s)}
        found: set[str] = set()
        for name in reach(top, starts):
            found |= self.mods[f"{self.root}.{name}" if name != self.root else name].third
        return found

    def check_lazy(self) -> None:
        for imp in self.imports:
            if not imp.lazy or not imp.targets:
                continue
            m = imp.mod
            me, starts = self.short(m.name), [self.short(t) for t, _ in self.loads(imp) if t != m.name]
            path = next((p for s in starts if (p := shortest(self.module_graph, s, {me}))), [])
            cycle = f"modules {' -> '.join([me, *path])}" if path else ""
            targets = {self.mods[t].pkg for t in imp.targets} - {m.pkg, ""}
            if not cycle and m.pkg:
                path = next((p for s in sorted(targets) if (p := shortest(self.package_graph, s, {m.pkg}))), [])
                cycle = f"packages {' -> '.join([m.pkg, *path])}" if path else ""
            if imp.comment and cycle:
                self.add(BREAKS, m, imp.node, f"  [{cycle}]")
            elif imp.comment:
                self.add(NO_CYCLE, m, imp.node, f"  [nothing it imports leads back to {me} or {m.pkg or 'the root'}]")
            elif cycle:
                self.add(NO_COMMENT, m, imp.node, f"  [it would close the cycle of {cycle}: say so in a comment]")
            else:
                kept = sorted(self.third_party(starts) - self.third_party([me]))
                why = f"; lazy, it keeps {', '.join(kept)} unimported" if kept else ""
                self.add(NO_COMMENT, m, imp.node, f"  [no cycle: it can be a top-level import{why}]")


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

    long, big = sorted((s for s in lay.sizes if s[0] > LONG), reverse=True), max(lay.sizes, default=(0, "-"))
    a, b = len(lay.f[PRIVATE_IMPORTS]), len(lay.f[PRIVATE_ATTRIBUTES])
    print(f"Layout of {src}: {len(lay.mods)} modules parsed, {n(UNPARSABLE)} unparsable, "
          f"{sum(r.endswith('.c') for _, r in lay.sizes)} .c; largest file {big[1]} ({big[0]} lines)")
    print(f"1. package cycles: {n(PACKAGE_CYCLES)}; package imports of the root: {n(ROOT_IMPORTS)}")
    print(f"2. module cycles: {n(MODULE_CYCLES)}")
    print(f"3. cross-package private accesses: {a + b} = a. imports {n(PRIVATE_IMPORTS)} + b. "
          f"attribute accesses {b};   ambiguous {n('ambiguous package private attribute accesses')}")
    print(f"   informational: underscore-module imports across packages {n('underscore-module imports across packages')}"
          f", third-party privates {n('third-party private accesses')}, unresolved own imports "
          f"{n('unresolved own imports')}\n   cross-module private accesses: imports {n('cross-module private imports')}"
          f" + attribute accesses {n('cross-module private attribute accesses')};   ambiguous "
          f"{n('ambiguous module private attribute accesses')}")
    print(f"4. module names used twice: {n(TWICE)}")
    print(f"5. lazy own imports without a cycle comment: {n(NO_COMMENT)}, whose cycle does not exist: {n(NO_CYCLE)};   "
          f"informational: breaking a cycle {n(BREAKS)}, inside functions: third-party "
          f"{n('third-party imports inside functions')}, stdlib {n('stdlib imports inside functions')}")
    print(f"6. files over {LONG} lines (questions, not findings): {len(long)}")
    for lines, rel in long:
        print(f"   ? {rel}: {lines} lines: one concept?")
    failed = sum(len(lay.f[k]) for k in RULES)
    print(f"findings: {failed}" + ("" if failed else " (the layout keeps its rules)"))
    shown = [k for k in RULES if lay.f[k]] + (sorted(k for k in lay.f if k not in RULES and lay.f[k]) if "--list" in argv else [])
    for kind in shown:
        print(f"\n== {kind} ({len(lay.f[kind])})" + ("" if kind in RULES else "   (informational)"))
        for rel, line, text in sorted(lay.f[kind]):
            print(f"{rel}:{line}: {text}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
