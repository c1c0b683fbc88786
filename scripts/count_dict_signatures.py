"""Count function signatures that take or return dict[str, Any] (per package)."""
import ast, sys
from collections import Counter
from pathlib import Path
root = Path(sys.argv[1])
per, total, funcs = Counter(), 0, 0
for p in root.rglob("*.py"):
    tree = ast.parse(p.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs += 1
            anns = [a.annotation for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs if a.annotation]
            if node.returns: anns.append(node.returns)
            if any("dict[str, Any]" in ast.unparse(a) or "Dict[str, Any]" in ast.unparse(a) for a in anns):
                total += 1
                rel = p.relative_to(root).parts
                per[rel[0] if len(rel) > 1 else rel[0].removesuffix('.py')] += 1
print(f"{total} of {funcs} function signatures take or return dict[str, Any]")
for k, v in per.most_common(): print(f"  {k}: {v}")
