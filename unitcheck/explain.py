"""Why a unit is what it is: the provenance pass and the trees of ``unitcheck explain``.

A finding's message names generators (``p:model.layers.3.mlp.up_proj.weight · v:silu_3``) but not
how they got to the node. The provenance pass walks the inferred graph once, in topological order,
and stores under ``node.meta["unitcheck_provenance"]`` a :class:`Carriers`: for each generator of
the node's unit, the inputs that carried it in. A tree follows those carriers back from the
finding to each generator's *origin*:

- ``p:W`` at the parameter ``W`` (a unit variable that a multiplicative use pinned, or one never
  constrained), ``in:x`` at the input ``x``, a declared scale at the declared leaf;
- ``v:NODE`` at ``NODE``, the violation or the op without a rule that created the opaque scale.

A parameter or buffer whose unit a same-unit constraint decided (a bias takes the unit of ``W x``)
is not an origin: its step says where it was bound and the path goes on through that combine's
other operand. Within one generator's tree a node is expanded once; a later visit is a ``seen``
step that names what the first one reaches (reconverging paths would otherwise grow
exponentially). Building and rendering are iterative, so a long residual stream cannot overflow
Python's stack.

>>> expl = explain_finding(ug, report.violations[1])        # doctest: +SKIP
>>> print(render_text(expl))                                # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import torch
import torch.fx as fx

from .codes import CODES
from .diagnostics import Location, Violation
from .fxutil import location, module_path, op_name
from .record import record
from .registry import rule_for
from .unitgraph import Binding, UnitGraph
from .units import Unit
from .values import UnitValue

__all__ = [
    "KEY", "Carriers", "Step", "Path", "GeneratorTree", "RoleTree", "Explanation", "carriers",
    "provenance", "explain_finding", "explain_node", "explain_all", "tree_lines", "render_text",
    "to_json", "rule_name", "node_info",
]

KEY = "unitcheck_provenance"
LEGEND = ("Each tree reads from the node down to where the generator starts (●): every step took it "
          "from the step below it; (^e) is its exponent there.")


@dataclass(frozen=True, slots=True)
class Carriers:
    """Per generator of a node's unit, the input nodes it came in through; none: born here.
    ``bound_at``: for a parameter or buffer whose unit a combine decided, that combine (then
    every generator is carried by it)."""

    by_generator: Mapping[str, tuple[fx.Node, ...]]
    bound_at: fx.Node | None = None


_NONE = Carriers({})


def carriers(node: fx.Node) -> Carriers:
    return node.meta.get(KEY, _NONE)  # type: ignore[no-any-return]


# -- the pass ---------------------------------------------------------------------------------


class _Generators:
    """Generator sets of unit values, computed once per distinct unit."""

    def __init__(self) -> None:
        self._memo: dict[Unit, frozenset[str]] = {}

    def __call__(self, u: UnitValue) -> frozenset[str]:
        if isinstance(u, Unit):
            got = self._memo.get(u)
            if got is None:
                got = self._memo[u] = frozenset(u.generators())
            return got
        if isinstance(u, tuple):
            out: frozenset[str] = frozenset()
            for x in u:
                out |= self(x)
            return out
        return frozenset()


def _is_leaf(ug: UnitGraph, node: fx.Node) -> bool:
    return node.name in ug.traced.leaves


def _binding(ug: UnitGraph, node: fx.Node) -> Binding | None:
    leaf = ug.traced.leaves.get(node.name)
    return ug.bindings.get(leaf.name) if leaf is not None else None


def _input_unit(node: fx.Node, arg: fx.Node) -> UnitValue:
    """The unit ``arg`` hands ``node``: one element of a tuple for ``getitem``."""
    u = record(arg).unit
    if isinstance(u, tuple) and node.target is operator.getitem and len(node.args) > 1:
        i = node.args[1]
        if isinstance(i, int) and -len(u) <= i < len(u):
            return u[i]
    return u


def _broken_inputs(ug: UnitGraph) -> dict[str, set[str]]:
    """Per violation node, the operands its violation names as broken (attention's q and k):
    their generators reach the output only through the opaque unit, not as themselves (those
    attention's output keeps come from v)."""
    out: dict[str, set[str]] = {}
    for v in ug.violations:
        for names in v.extra.get("sources", {}).values():
            out.setdefault(v.node, set()).update(names)
    return out


def provenance(ug: UnitGraph) -> None:
    """Store :class:`Carriers` on every node of ``ug``'s graph (once: a second call returns at
    once). Linear in nodes x generators per unit; on the 70B-shaped Llama a few tens of ms."""
    graph = ug.graph
    first = next(iter(graph.nodes), None)
    if first is None or KEY in first.meta:
        return
    gens = _Generators()
    broken = _broken_inputs(ug)
    bound_at: dict[fx.Node, fx.Node] = {}
    for n in ug.traced.leaf_nodes():
        b = _binding(ug, n)
        if b is not None and b.how == "combine" and b.at is not None:
            with contextlib.suppress(KeyError):  # a graph edited after inference
                bound_at[n] = ug.node(b.at)
    for n in graph.nodes:
        if n.op == "output":
            continue
        gs = gens(record(n).unit)
        if not gs:
            n.meta[KEY] = _NONE
            continue
        if n.op in ("placeholder", "get_attr"):
            at = bound_at.get(n)
            n.meta[KEY] = Carriers({g: (at,) for g in gs}, at) if at is not None else Carriers({g: () for g in gs})
            continue
        ins = [(p, gens(_input_unit(n, p))) for p in n.all_input_nodes]
        by: dict[str, tuple[fx.Node, ...]] = {}
        for g in gs:
            c = tuple(p for p, pg in ins if g in pg)
            if len(c) > 1:  # a leaf this very combine bound took its unit from the others
                rest = tuple(p for p in c if bound_at.get(p) is not n)
                c = rest or c
            if len(c) > 1 and n.name in broken:  # the violation's operands went into its opaque unit
                c = tuple(p for p in c if p.name not in broken[n.name]) or c
            by[g] = c
        n.meta[KEY] = Carriers(by)


# -- trees ------------------------------------------------------------------------------------


@dataclass(eq=False)
class Step:
    """One node on a generator's way: ``kind`` is ``op`` (carried it on), ``origin`` (where the
    generator starts: a tree leaf), ``bound`` (a leaf whose unit a combine decided), ``seen``
    (expanded earlier in this tree: ``ref``) or ``missing`` (no input carries it: a rule bug)."""

    node: str
    op: str
    module: str
    location: Location | None
    exponent: Fraction
    kind: str = "op"
    via: str | None = None  # the argument of the step below (downstream) that this value fed
    note: str = ""
    ref: Step | None = None


@dataclass(eq=False)
class Path:
    """A chain of steps, upstream from its first; where a step has several carriers the chain
    ends and each carrier starts a branch."""

    steps: list[Step] = field(default_factory=list)
    branches: list[Path] = field(default_factory=list)

    def walk(self) -> Iterator[Step]:
        stack: list[Path] = [self]
        while stack:
            p = stack.pop()
            yield from p.steps
            stack.extend(reversed(p.branches))


@dataclass
class GeneratorTree:
    generator: str
    exponent: Fraction
    path: Path
    _reach: _Reach | None = field(default=None, init=False, repr=False)

    def leaves(self) -> list[Step]:
        """The origins this tree reaches (the generator's leaf, param, input or opaque birth)."""
        return [s for s in self.path.walk() if s.kind == "origin"]

    def reaches(self, step: Step) -> list[str]:
        """The origins under ``step`` (for a ``seen`` step: under its first expansion)."""
        if self._reach is None:
            self._reach = _Reach(self.path)
        return self._reach(step)


def _origin_name(s: Step) -> str:
    return s.module if s.op in ("param", "buffer", "input") else s.node


class _Reach:
    """Origins below a step, following ``seen`` references to their first expansion (which may
    itself hold references): a walk over the tree's steps with a visited set, memoised."""

    def __init__(self, top: Path) -> None:
        self.where: dict[Step, tuple[Path, int]] = {s: (p, i) for p in _paths(top) for i, s in enumerate(p.steps)}
        self.memo: dict[Step, list[str]] = {}

    def _next(self, s: Step) -> list[Step]:
        p, i = self.where[s]
        out = [p.steps[i + 1]] if i + 1 < len(p.steps) else [b.steps[0] for b in p.branches if b.steps]
        if s.ref is not None:
            out.append(s.ref)
        return out

    def __call__(self, step: Step) -> list[str]:
        start = step.ref or step
        got = self.memo.get(start)
        if got is None:
            found: set[str] = set()
            seen: set[Step] = {start}
            stack = [start]
            while stack:
                s = stack.pop()
                if s.kind == "origin":
                    found.add(_origin_name(s))
                for t in self._next(s):
                    if t not in seen:
                        seen.add(t)
                        stack.append(t)
            got = self.memo[start] = sorted(found)
        return got


def _paths(p: Path) -> Iterator[Path]:
    stack = [p]
    while stack:
        q = stack.pop()
        yield q
        stack.extend(reversed(q.branches))


@dataclass
class RoleTree:
    role: str
    unit: Unit
    sources: list[str]  # the finding node's arguments this role's unit is made of
    trees: list[GeneratorTree]


@dataclass
class Explanation:
    """The trees of every generator of every role of one finding (or of one node's unit)."""

    node: str
    op: str
    module: str
    location: Location | None
    finding: Violation | None
    key: str | None
    roles: list[RoleTree]

    def generators(self) -> set[str]:
        return {g for r in self.roles for g in r.unit.generators()}

    def leaves(self) -> set[str]:
        """The generators whose trees reach at least one origin."""
        return {t.generator for r in self.roles for t in r.trees if t.leaves()}


def _exponent(u: UnitValue, g: str) -> Fraction:
    if isinstance(u, Unit):
        return u.exponent(g)
    if isinstance(u, tuple):
        for x in u:
            e = _exponent(x, g)
            if e:
                return e
    return Fraction(0)


def _arg_label(consumer: fx.Node, producer: fx.Node) -> str | None:
    """The name of ``consumer``'s argument that ``producer`` fed (schema names for ATen ops)."""
    t = consumer.target
    names: list[str] = []
    if isinstance(t, torch._ops.OpOverload):
        names = [a.name for a in t._schema.arguments]
    for i, a in enumerate(consumer.args):
        hit = a is producer or (isinstance(a, (list, tuple)) and any(x is producer for x in a))
        if hit:
            base = names[i] if i < len(names) else f"arg{i}"
            if isinstance(a, (list, tuple)):
                base += f"[{next(j for j, x in enumerate(a) if x is producer)}]"
            return base
    for k, a in consumer.kwargs.items():
        if a is producer or (isinstance(a, (list, tuple)) and any(x is producer for x in a)):
            return str(k)
    return None


def rule_name(ug: UnitGraph, node: fx.Node) -> str | None:
    """``module.function`` of the unit rule registered for the node's target, if any."""
    if node.op not in ("call_function", "call_method", "call_module"):
        return None
    fn = rule_for(node, ug.traced.gm)
    return f"{fn.__module__}.{fn.__name__}" if fn is not None else None


def _leaf_note(ug: UnitGraph, node: fx.Node, g: str, origin: bool) -> str:
    leaf = ug.traced.leaves[node.name]
    what = {"param": "parameter", "buffer": "buffer", "input": "model input", "constant": "constant"}[leaf.kind]
    b = ug.bindings.get(leaf.name)
    tied = f" (one unit variable with {', '.join(b.tied)})" if b is not None and b.tied else ""
    if leaf.kind == "input":
        if g == f"in:{leaf.name}":
            return f"{what} {leaf.name}: a float input has its own scale"
        return f"{what} {leaf.name}: its unit was given (input_units)"
    if b is None or b.how == "declared":
        return f"{what} {leaf.name}: declared with unit {record(node).unit} (unitcheck.declare, __units__ or [tool.unitcheck.declare])"
    if not origin:
        return (f"{what} {leaf.name}{tied}: a unit variable that the same-unit constraint at node {b.at} "
                "bound to the unit of its other operand")
    if b.how == "pin":
        return (f"{what} {leaf.name}{tied}: its own generator, pinned by the multiplicative use at node {b.at}")
    return f"{what} {leaf.name}{tied}: never constrained, so its own generator"


def _opaque_note(ug: UnitGraph, node: fx.Node) -> str:
    rec = record(node)
    rule = rule_name(ug, node)
    by = f" (rule {rule})" if rule else ""
    if rec.violation is not None:
        c = CODES[rec.violation]
        return (f"an opaque scale is born here: {c.code} {c.name}{by}; the op breaks equivariance, so its "
                "output's scaling is unknown and every later use is judged with this fresh generator")
    if rec.unknown:
        return f"an opaque scale is born here: no unit rule for {op_name(node)} (UC901), so its output's scaling is unknown"
    return f"an opaque scale is born here{by}"


def _is_origin(ug: UnitGraph, node: fx.Node, g: str) -> bool:
    if g.startswith("v:"):
        name = g[2:]
        return name == node.name or name.startswith(node.name + ".")
    return _is_leaf(ug, node) and carriers(node).bound_at is None


_HEADERS: weakref.WeakKeyDictionary[fx.Graph, dict[fx.Node, tuple[str, str, Location | None]]] = \
    weakref.WeakKeyDictionary()


def _header(ug: UnitGraph, node: fx.Node) -> tuple[str, str, Location | None]:
    """(op, module, source line) of a node, or (kind, qualified name, None) of a leaf; cached
    per graph, since reading a source line means parsing the node's stack trace and the HTML
    report asks for the same nodes in hundreds of trees."""
    cache = _HEADERS.get(ug.graph)
    if cache is None:
        cache = _HEADERS[ug.graph] = {}
    got = cache.get(node)
    if got is None:
        leaf = ug.traced.leaves.get(node.name)
        if leaf is not None:
            got = (leaf.kind, leaf.name, None)
        else:
            got = (op_name(node), module_path(node), record(node).location or location(node))
        cache[node] = got
    return got


def _step(ug: UnitGraph, node: fx.Node, g: str, exponent: Fraction | None, via: str | None) -> Step:
    e = exponent if exponent is not None else _exponent(record(node).unit, g)
    op, module, loc = _header(ug, node)
    return Step(node.name, op, module, loc, e, via=via)


def _tree(ug: UnitGraph, g: str, root: fx.Node, exponent: Fraction, sources: Sequence[fx.Node] | None) -> Path:
    """The tree of generator ``g`` from ``root`` upstream; ``sources``: the root's carriers of
    this role (None: its own)."""
    seen: dict[fx.Node, Step] = {}
    top = Path()
    stack: list[tuple[Path, fx.Node, str | None, Sequence[fx.Node] | None, Fraction | None]] = [
        (top, root, None, sources, exponent)]
    while stack:
        path, node, via, override, exp = stack.pop()
        while True:
            earlier = seen.get(node)
            if earlier is not None:
                s = _step(ug, node, g, exp, via)
                s.kind, s.ref = "seen", earlier
                path.steps.append(s)
                break
            step = _step(ug, node, g, exp, via)
            seen[node] = step
            path.steps.append(step)
            exp = None
            if override is None and _is_origin(ug, node, g):
                step.kind = "origin"
                step.note = _leaf_note(ug, node, g, True) if _is_leaf(ug, node) else _opaque_note(ug, node)
                break
            c = carriers(node)
            nexts = tuple(p for p in override if g in _Generators()(_input_unit(node, p))) \
                if override is not None else c.by_generator.get(g, ())
            override = None
            if c.bound_at is not None:
                step.kind = "bound"
                step.note = _leaf_note(ug, node, g, False)
            if not nexts:
                step.kind = "missing"
                rule = rule_name(ug, node)
                step.note = f"no input carries {g}: the rule {rule or '(none)'} introduced it"
                break
            if len(nexts) == 1:
                via = None if c.bound_at is not None else _arg_label(node, nexts[0])
                node = nexts[0]
                continue
            subs = [Path() for _ in nexts]
            path.branches.extend(subs)
            for sub, nxt in reversed(list(zip(subs, nexts, strict=True))):
                stack.append((sub, nxt, _arg_label(node, nxt), None, None))
            break
    return top


def _role_sources(ug: UnitGraph, node: fx.Node, v: Violation, role: str, unit: Unit) -> list[fx.Node] | None:
    """The arguments a role's unit is made of: what the rule said; else the inputs of exactly
    that unit; else the node itself (an interface: its own unit); else the fewest inputs whose
    units multiply to it; else every input (None: the node's own carriers)."""
    named = v.extra.get("sources", {}).get(role)
    if named:
        return [ug.node(n) for n in named]
    ins = node.all_input_nodes
    same = [p for p in ins if record(p).unit == unit]
    if same:
        return same
    if record(node).unit == unit:
        return None
    from itertools import combinations

    units = [(p, record(p).unit) for p in ins if isinstance(record(p).unit, Unit)]
    for k in (2, 3):
        for combo in combinations(units, k):
            prod = Unit()
            for _, u in combo:
                prod = prod * u  # type: ignore[operator]
            if prod == unit:
                return [p for p, _ in combo]
    return list(ins)


def explain_finding(ug: UnitGraph, v: Violation, key: str | None = None) -> Explanation:
    """One tree per generator of each of the finding's units."""
    provenance(ug)
    try:
        node = ug.node(v.node)
    except KeyError:  # an update-typing finding (UC4xx) names a parameter, not a graph node
        return Explanation(v.node, v.op, v.module, v.location, v, key, [])
    roles = []
    for role, unit in v.units.items():
        if not isinstance(unit, Unit):
            continue
        srcs = _role_sources(ug, node, v, role, unit)
        trees = [GeneratorTree(g, e, _tree(ug, g, node, e, srcs)) for g, e in unit.items()]
        roles.append(RoleTree(role, unit, [p.name for p in srcs] if srcs is not None else [node.name], trees))
    op, module, loc = _header(ug, node)
    return Explanation(node.name, op, module, v.location or loc, v, key, roles)


def explain_node(ug: UnitGraph, node: fx.Node) -> Explanation:
    """The trees of the generators of a node's own unit (a node with no finding)."""
    provenance(ug)
    u = record(node).unit
    units: list[tuple[str, Unit]] = []
    if isinstance(u, Unit):
        units = [("unit", u)]
    elif isinstance(u, tuple):
        units = [(f"unit[{i}]", x) for i, x in enumerate(u) if isinstance(x, Unit)]
    roles = [RoleTree(role, x, [node.name], [GeneratorTree(g, e, _tree(ug, g, node, e, None)) for g, e in x.items()])
             for role, x in units]
    op, module, loc = _header(ug, node)
    return Explanation(node.name, op, module, loc, None, None, roles)


def explain_all(ug: UnitGraph, violations: Sequence[Violation], keys: Sequence[str]) -> dict[str, Explanation]:
    """Explanations keyed by finding key (the HTML report's default blocks)."""
    return {k: explain_finding(ug, v, k) for v, k in zip(violations, keys, strict=True)}


# -- rendering --------------------------------------------------------------------------------


def _exp(e: Fraction) -> str:
    return "" if e == 1 else f"^{e}"


def _where(loc: Location | None, root: str | None) -> str:
    if loc is None:
        return ""
    return f"{_relpath(loc.file, root or os.getcwd())}:{loc.line}"


@functools.lru_cache(maxsize=1024)
def _relpath(file: str, root: str) -> str:
    from .report.text import relpath

    return relpath(file, root)


def _step_text(s: Step, prev: Step | None, tree: GeneratorTree) -> str:
    """One step: node, op, exponent where it changes, a reference's reach, and the source line
    where it changes (the file's base name: the header and the JSON give the full path)."""
    where = ""
    if s.location is not None and (prev is None or prev.location != s.location):
        where = f"  {os.path.basename(s.location.file)}:{s.location.line}  {s.location.code}".rstrip()
    if s.kind == "origin":
        if s.op in ("param", "buffer", "input"):
            return f"● {tree.generator}  {s.note}"
        return f"● {tree.generator}  {s.node} [{s.op}]{where}\n{{cont}}  {s.note}"
    parts = [f"{s.node} [{s.op}]"]
    if prev is None or s.exponent != prev.exponent:
        parts.append(f"(^{s.exponent})")
    if s.kind == "seen":
        got = tree.reaches(s)
        parts.append(f"(shown above; reaches {', '.join(got) if got else 'no origin'})")
    text = "  ".join(parts) + where
    if s.kind in ("bound", "missing"):
        text += f"\n{{cont}}  <- {s.note}"
    return text


_MAX_PREFIX = 72  # characters of tree drawing kept in front of a step


def _clip(prefix: str) -> str:
    """Deep nesting (only pathological graphs reach it) keeps its outermost and innermost
    levels, so the text stays linear in the number of steps."""
    if len(prefix) <= _MAX_PREFIX:
        return prefix
    return prefix[:30] + "┄" + prefix[-(_MAX_PREFIX - 31):]


def tree_lines(tree: GeneratorTree, indent: str = "  ") -> list[tuple[str, Step | None]]:
    """The tree as text lines, each with the step it shows (None for the header): one chain
    per indentation level, a branch (``├─``, ``└─``) where a step has several carriers."""
    out: list[tuple[str, Step | None]] = [(f"{indent}{tree.generator}{_exp(tree.exponent)}", None)]
    stack: list[tuple[Path, str, str, Step | None]] = [(tree.path, indent + "  ", indent + "  ", None)]
    while stack:
        path, first, rest, prev = stack.pop()
        for i, s in enumerate(path.steps):
            label = f"{s.via}: " if i == 0 and s.via and first != rest else ""
            more = rest + "  "
            text = _clip(first if i == 0 else rest) + label + _step_text(s, prev, tree)
            for k, line in enumerate(text.split("\n")):
                out.append((line.replace("{cont}", _clip(more)), s if k == 0 else None))
            prev = s
        n = len(path.branches)
        for j in reversed(range(n)):
            last = j == n - 1
            stack.append((path.branches[j], rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "), prev))
    return out


def render_text(expl: Explanation, root: str | None = None) -> str:
    lines = []
    where = _where(expl.location, root)
    if expl.finding is not None:
        v = expl.finding
        lines.append(f"{v.rule} [{v.severity}] at node {v.node} ({v.op}) in {v.module or '<root>'}"
                     + (f", {where}" if where else ""))
        lines.append(f"  {v.message}")
        if expl.key:
            lines.append(f"  key {expl.key}")
    else:
        lines.append(f"node {expl.node} ({expl.op}) in {expl.module or '<root>'}" + (f", {where}" if where else ""))
    if expl.location is not None and expl.location.code:
        lines.append(f"  | {expl.location.code}")
    if expl.roles:
        lines.append(f"\n{LEGEND}")
    if not expl.roles:
        lines.append("\nno unitful units to explain (dimensionless, index or opaque-free)")
    for r in expl.roles:
        src = f" (from {', '.join(r.sources)})" if r.sources and r.sources != [expl.node] else ""
        lines.append(f"\n{r.role}: {r.unit}{src}")
        if not r.trees:
            lines.append("  dimensionless: no generator to follow")
        for t in r.trees:
            lines.append("")
            lines += [text for text, _ in tree_lines(t)]
    return "\n".join(lines) + "\n"


def _step_json(s: Step, tree: GeneratorTree, root: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"node": s.node, "op": s.op, "module": s.module, "kind": s.kind,
                           "exponent": str(s.exponent)}
    if s.via:
        out["via"] = s.via
    if s.location is not None:
        out["location"] = {"file": _relpath(s.location.file, root or os.getcwd()), "line": s.location.line,
                           "code": s.location.code}
    if s.note:
        out["note"] = s.note
    if s.kind == "seen":
        out["reaches"] = tree.reaches(s)
    return out


def _steps_json(tree: GeneratorTree, root: str | None) -> list[dict[str, Any]]:
    """The tree as a flat list in reading order: each step has an ``id`` and the ``parent`` it
    fed (None for the node itself); a ``seen`` step has the ``ref`` of its first expansion. Flat,
    so a tree thousands of branches deep still encodes (nested objects would exceed ``json``'s
    recursion limit)."""
    ids: dict[Step, int] = {}
    out: list[dict[str, Any]] = []
    stack: list[tuple[Path, int | None]] = [(tree.path, None)]
    while stack:
        p, parent = stack.pop()
        for s in p.steps:
            ids[s] = len(out)
            d = {"id": len(out), "parent": parent, **_step_json(s, tree, root)}
            if s.ref is not None and s.ref in ids:
                d["ref"] = ids[s.ref]
            out.append(d)
            parent = ids[s]
        stack.extend((b, parent) for b in reversed(p.branches))
    return out


def to_json(expl: Explanation, root: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"node": expl.node, "op": expl.op, "module": expl.module}
    if expl.location is not None:
        out["location"] = {"file": _where(expl.location, root).rsplit(":", 1)[0], "line": expl.location.line}
    if expl.finding is not None:
        out["finding"] = {**expl.finding.to_json(), "key": expl.key}
    out["roles"] = [
        {"role": r.role, "unit": str(r.unit), "sources": r.sources,
         "generators": [{"generator": t.generator, "exponent": str(t.exponent),
                         "leaves": sorted({_origin_name(s) for s in t.leaves()}),
                         "steps": _steps_json(t, root)} for t in r.trees]}
        for r in expl.roles
    ]
    return out


# -- one node (``unitcheck units --node``) ----------------------------------------------------


def node_info(ug: UnitGraph, node: fx.Node) -> dict[str, Any]:
    """A node's forward and gradient units, what set them, its source line and its finding."""
    rec = record(node)
    leaf = ug.traced.leaves.get(node.name)
    info: dict[str, Any] = {"node": node.name, "unit": _fmt(rec.unit), "grad_unit": _fmt(rec.grad_unit),
                            "loss_unit": str(ug.loss_unit) if ug.loss_unit is not None else None}
    if leaf is not None:
        b = ug.bindings.get(leaf.name)
        info |= {"op": leaf.kind, "module": leaf.name, "location": None}
        if leaf.kind == "input":
            how = "leaf policy: a float input gets its own generator in:<name>; integer inputs are index data"
        elif b is None:
            how = "leaf policy: a constant (polymorphic if every entry is 0/inf/extreme, else dimensionless)" \
                if leaf.kind == "constant" else "declared (unitcheck.declare, __units__ or [tool.unitcheck.declare])"
        else:
            how = {
                "pin": f"leaf policy: a unit variable pinned to its own generator by the multiplicative use at node {b.at}",
                "combine": f"leaf policy: a unit variable bound by the same-unit constraint at node {b.at}",
                "nonlinear": f"leaf policy: a unit variable made dimensionless by the non-homogeneous use at node {b.at}",
                "default": "leaf policy: a unit variable never constrained: its own generator (a buffer: dimensionless)",
                "declared": "declared (unitcheck.declare, __units__ or [tool.unitcheck.declare])",
            }.get(b.how, b.how)
            if b.tied:
                how += f"; one unit variable with {', '.join(b.tied)}"
        info["rule"] = None
        info["set_by"] = how
    else:
        loc = rec.location or location(node)
        rule = rule_name(ug, node)
        info |= {"op": op_name(node), "module": module_path(node),
                 "location": None if loc is None else {"file": loc.file, "line": loc.line, "code": loc.code}}
        info["rule"] = rule
        if rule is not None:
            fn = rule_for(node, ug.traced.gm)
            doc = " ".join((fn.__doc__ or "").split()) if fn is not None else ""
            first = doc.split("Why it matters:")[0].removeprefix("What it does:").strip()
            info["set_by"] = f"rule {rule}" + (f": {first}" if first else "")
        elif node.op == "output":
            info["set_by"] = "the graph's output"
        else:
            info["set_by"] = "no unit rule: index-valued outputs are index data, a float output an opaque scale (UC901)"
    info["gradient"] = "u(L) / u(node) (Prop. 1: the gradient has the dual unit)"
    info["finding"] = rec.violation or rec.interface or ("UC901" if rec.unknown else None)
    return info


def _fmt(u: UnitValue) -> str | None:
    if u is None:
        return None
    if isinstance(u, tuple):
        return "(" + ", ".join(str(_fmt(x)) for x in u) + ")"
    return str(u)
