"""The project's modules import each other without cycles (counting imports inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# source directory -> the package name it is installed as
PACKAGES = {"unitcheck": "unitcheck", "rules": "unitcheck.rules", "models": "unitcheck.models"}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for folder, pkg in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = path
    return mods


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def import_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports anywhere in its body (functions included)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if _is_package(path) else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import name`: the submodule when there is one, else the package
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_checker_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert "unitcheck.rules.linear" in graph and "unitcheck.infer" in graph
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_library_stands_alone() -> None:
    """Linting imports neither the NVFP4 quantiser nor the reference models' layers; a rewrite's
    generated code imports the library's canonicaliser, not the bundled models."""
    import subprocess
    import sys

    code = (
        "import sys, torch, unitcheck\n"
        "from torch import nn\n"
        "m = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 2))\n"
        "unitcheck.lint(m, torch.randn(3, 4))\n"
        "print(sorted(k for k in sys.modules if k.startswith(('unitcheck.quant', 'unitcheck.models'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    from unitcheck.models import build

    from unitcheck.rewrite.api import rewrite

    source = rewrite(*build("gpt", n_layer=1)).source
    assert "from unitcheck.canonical import" in source and "unitcheck.models" not in source
