"""Generate docs/rules/UC*.md from the code table (``python -m unitcheck.docgen``).

A test regenerates them in memory and fails when the committed files drift.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .codes import CODES

__all__ = ["rule_markdown", "index_markdown", "write_docs"]


def rule_markdown(code: str) -> str:
    c = CODES[code]
    flags = ", opt-in" if c.opt_in else ""
    return (
        f"# {c.code}: {c.name}\n\n"
        f"*{c.severity}, {c.status}{flags}* — {c.summary}.\n\n"
        f"{c.doc}\n\n"
        f"## Suggested fix (as printed)\n\n{c.fix}\n\n"
        f"Suppress one occurrence with `# unitcheck: ignore[{c.code}]` on the offending line.\n"
    )


def index_markdown() -> str:
    rows = "\n".join(
        f"| [{c.code}]({c.code}.md) | {c.severity}{' (opt-in)' if c.opt_in else ''} | {c.name} | {c.summary} |"
        for c in CODES.values()
    )
    return (
        "# Rule codes\n\nStable codes, never reused. Generated from `unitcheck/codes.py` by "
        "`python -m unitcheck.docgen`.\n\n| code | severity | name | what |\n| --- | --- | --- | --- |\n"
        + rows + "\n"
    )


def expected_files() -> dict[str, str]:
    files = {f"{code}.md": rule_markdown(code) for code in CODES}
    files["README.md"] = index_markdown()
    return files


def write_docs(directory: str | Path = "docs/rules") -> list[Path]:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in expected_files().items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":
    for p in write_docs(sys.argv[1] if len(sys.argv) > 1 else "docs/rules"):
        print(p)
