"""JUnit XML: one test case per checked module, so CI dashboards show pass/fail per layer."""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from xml.etree import ElementTree as ET

__all__ = ["render"]


def _modules(report: Any) -> list[str]:
    from ..fxutil import module_path

    seen: dict[str, None] = {}
    for n in report.unit_graph.traced.compute_nodes():
        seen.setdefault(module_path(n) or "<root>", None)
    for v in report.violations:
        seen.setdefault(v.module or "<root>", None)
    return list(seen)


def render(report: Any, root: str | None = None) -> str:
    by_module: dict[str, list[Any]] = defaultdict(list)
    for v in report.violations:
        by_module[v.module or "<root>"].append(v)
    modules = _modules(report)
    failures = sum(1 for m in modules if by_module.get(m))
    suites = ET.Element("testsuites", name="unitcheck", tests=str(len(modules)), failures=str(failures))
    suite = ET.SubElement(suites, "testsuite", name=f"unitcheck.{report.model}", tests=str(len(modules)),
                          failures=str(failures), errors="0", skipped="0")
    for m in modules:
        case = ET.SubElement(suite, "testcase", classname=f"unitcheck.{report.model}", name=m)
        for v in by_module.get(m, []):
            loc = f"{v.location.file}:{v.location.line}" if v.location else ""
            fail = ET.SubElement(case, "failure", message=f"{v.rule}: {v.message}", type=v.rule)
            fail.text = f"{loc}\nnode {v.node} ({v.op})\nfix: {v.fix}"
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
