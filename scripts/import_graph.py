#!/usr/bin/env python3
"""The shape of latscope's source tree: modules, lines, the longest module and function, and the
import loops between packages, counting the imports written inside functions (the "lazy" ones
hide a loop from Python, not from the reader).

    python3 scripts/import_graph.py            # the figures, then every loop and long function
    python3 scripts/import_graph.py --dicts    # and where dict[str, Any] signatures remain
    python3 scripts/import_graph.py --root DIR # another checkout's src/ (before/after figures)

Reads the source with ``ast``: nothing is imported. A "package" is the first name under
``latscope`` (``latscope.load.client`` is in ``load``; ``latscope.rundir`` is its own). The
ground (``GROUND``) is what every layer may import; it imports nothing above it.
tests/unit/test_layers.py holds the tree to both rules.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = "latscope"
# The ground: plain values and helpers every layer uses; they import only each other.
GROUND = frozenset({"latscope", "latscope.model", "latscope.errors", "latscope.slo", "latscope.rundir",
                    "latscope.stats", "latscope.redact", "latscope.results",
                    "latscope.reliability", "latscope.runfiles", "latscope.percentiles",
                    "latscope.itlpool", "latscope.steady", "latscope.native", "latscope.twins",
                    "latscope.fastread"})
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: set[str] = field(default_factory=set)  # latscope modules or packages it imports
    functions: list[tuple[str, int]] = field(default_factory=list)  # (qualified name, lines)
    # functions (nested ones included) and those taking or returning dict[str, Any]: #49's figure
    signatures: int = 0
    untyped_dicts: int = 0


def module_name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _functions(tree: ast.AST) -> list[tuple[str, int]]:
    """Every function and method with its length in lines (a nested function counts in its
    enclosing one and is not listed again)."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, (child.end_lineno or child.lineno)
                              - child.lineno + 1))
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif not isinstance(child, ast.Lambda):
                visit(child, prefix)

    visit(tree, "")
    return found


def _imports(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The latscope modules this module imports, anywhere in it (functions included)."""
    out: set[str] = set()
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from latscope.load import workers` imports the module latscope.load.workers
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        out.update(t for t in targets if t == ROOT or t.startswith(ROOT + "."))
    out.discard(name)
    return out


def _untyped_dict_signatures(tree: ast.AST) -> tuple[int, int]:
    """(functions, those with a parameter or return annotated ``dict[str, Any]``: data that
    flows as an open dict instead of a type of its own)."""
    count = total = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            total += 1
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            notes = [a.annotation for a in args if a.annotation] + \
                ([node.returns] if node.returns else [])
            count += any("dict[str, Any]" in ast.unparse(n).replace("Dict[", "dict[")
                         for n in notes)
    return total, count


def scan(src: Path) -> dict[str, Module]:
    paths = sorted((src / ROOT).rglob("*.py"))
    known = {module_name(src, p) for p in paths}
    modules: dict[str, Module] = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        name = module_name(src, path)
        mod = Module(name, path, len(text.splitlines()))
        mod.imports = _imports(tree, name, path.name == "__init__.py", known)
        mod.functions = _functions(tree)
        mod.signatures, mod.untyped_dicts = _untyped_dict_signatures(tree)
        modules[name] = mod
    return modules


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for mod in modules.values():
        here = package_of(mod.name)
        graph.setdefault(here, set())
        for target in mod.imports:
            there = package_of(target)
            if there not in (here, ROOT):
                graph[here].add(there)
    return graph


def module_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Module to module (an import of a package counts as one of its ``__init__``)."""
    return {m.name: {t for t in m.imports if t in modules} for m in modules.values()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def strong(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
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
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(found)


def ground_violations(modules: dict[str, Module]) -> list[str]:
    """``module -> import`` for each import of a ground module that is not itself ground."""
    return sorted(f"{m.name} -> {t}" for m in modules.values() if m.name in GROUND
                  for t in m.imports if t not in GROUND)


def long_functions(modules: dict[str, Module], limit: int = MAX_FUNCTION_LINES,
                   ) -> list[tuple[int, str]]:
    return sorted(((n, f"{m.name}.{f}") for m in modules.values() for f, n in m.functions
                   if n > limit), reverse=True)


def long_modules(modules: dict[str, Module], limit: int = MAX_MODULE_LINES,
                 ) -> list[tuple[int, str]]:
    return sorted(((m.lines, m.name) for m in modules.values() if m.lines > limit), reverse=True)


def _cycle_edges(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    members = set(component)
    return [f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in members]


def report(modules: dict[str, Module]) -> str:
    functions = [(n, f"{m.name}.{f}") for m in modules.values() for f, n in m.functions]
    longest_module = max(modules.values(), key=lambda m: m.lines)
    longest_function = max(functions)
    packages = package_graph(modules)
    package_loops = cycles(packages)
    file_loops = cycles(module_graph(modules))
    lines = [
        f"modules: {len(modules)}",
        f"lines: {sum(m.lines for m in modules.values())}",
        f"longest module: {longest_module.name} ({longest_module.lines} lines)",
        f"longest function: {longest_function[1]} ({longest_function[0]} lines)",
        f"modules over {MAX_MODULE_LINES} lines: {len(long_modules(modules))}",
        f"functions over {MAX_FUNCTION_LINES} lines: {len(long_functions(modules))}",
        f"package import loops (imports in functions counted): {len(package_loops)}",
        f"module import loops: {len(file_loops)}",
        f"ground imports from above: {len(ground_violations(modules))}",
        f"functions taking or returning dict[str, Any]: "
        f"{sum(m.untyped_dicts for m in modules.values())} of "
        f"{sum(m.signatures for m in modules.values())}",
    ]
    for component in package_loops:
        lines.append(f"\npackage loop {', '.join(component)}:")
        lines += [f"  {edge}" for edge in _cycle_edges(packages, component)]
    for component in file_loops:
        lines.append(f"module loop: {', '.join(component)}")
    lines += [f"ground: {v}" for v in ground_violations(modules)]
    lines += [f"long module: {name} ({n} lines)" for n, name in long_modules(modules)]
    lines += [f"long function: {name} ({n} lines)" for n, name in long_functions(modules)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1] / "src",
                        help="the src/ directory that holds latscope/ (default: this checkout's)")
    parser.add_argument("--dicts", action="store_true",
                        help="also the dict[str, Any] signatures per package, most first")
    args = parser.parse_args(argv)
    modules = scan(args.root)
    print(report(modules))
    if args.dicts:
        per: dict[str, int] = {}
        for m in modules.values():
            per[package_of(m.name)] = per.get(package_of(m.name), 0) + m.untyped_dicts
        for package, n in sorted(per.items(), key=lambda kv: -kv[1]):
            if n:
                print(f"  {package}: {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
