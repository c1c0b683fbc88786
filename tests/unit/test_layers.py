"""The tree's layering, read from the source by scripts/import_graph.py (ast, nothing imported):
the ground imports nothing above it, no two packages (nor two modules) import each other, even
through an import written inside a function, and no module or function outgrows its limit."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def graph():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def modules(graph):
    return graph.scan(ROOT / "src")


def test_the_ground_imports_nothing_above_it(graph, modules):
    assert graph.GROUND <= set(modules), "a ground module is missing: GROUND names what exists"
    assert graph.ground_violations(modules) == []


def test_no_package_imports_another_that_imports_it_back(graph, modules):
    assert graph.cycles(graph.package_graph(modules)) == []


def test_no_module_imports_another_that_imports_it_back(graph, modules):
    # inside a package too, and a TYPE_CHECKING import counts (it still says "I need you")
    assert graph.cycles(graph.module_graph(modules)) == []


def test_no_module_is_over_500_lines_and_no_function_over_80(graph, modules):
    # a reader takes in a module or a function at once: past these it is two things
    assert graph.long_modules(modules) == [], f"split along its seams ({graph.MAX_MODULE_LINES})"
    assert graph.long_functions(modules) == [], f"split it ({graph.MAX_FUNCTION_LINES} lines)"


def test_the_size_limits_are_counted_as_a_reader_counts_them(graph, tmp_path):
    # a module's lines are its lines; a function's run from its def to its last line, a
    # nested function inside its enclosing one; the limits fail one line past them
    pkg = tmp_path / "latscope"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(graph.MAX_FUNCTION_LINES - 1))
    (pkg / "__init__.py").write_text("")
    (pkg / "fits.py").write_text(f"def f():\n{body}\n")
    (pkg / "long.py").write_text(f"def g():\n{body}\n    return 1\n"
                                 + "\n" * (graph.MAX_MODULE_LINES - graph.MAX_FUNCTION_LINES))
    found = graph.scan(tmp_path)
    assert graph.long_functions(found) == [(graph.MAX_FUNCTION_LINES + 1, "latscope.long.g")]
    assert graph.long_modules(found) == [(graph.MAX_MODULE_LINES + 1, "latscope.long")]


def test_a_lazy_import_closes_a_loop_too(graph, tmp_path):
    # the checker must see imports inside functions: a loop hidden that way is still a loop
    pkg = tmp_path / "latscope"
    for name, text in {"__init__.py": "", "a/__init__.py": "", "b/__init__.py": "",
                       "a/x.py": "from latscope.b.y import f\n",
                       "b/y.py": "def f():\n    from latscope.a import x\n    return x\n",
                       "model.py": "def g():\n    import latscope.a.x\n"}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    found = graph.scan(tmp_path)
    assert graph.cycles(graph.package_graph(found)) == [["a", "b"]]
    assert graph.ground_violations(found) == ["latscope.model -> latscope.a.x"]
