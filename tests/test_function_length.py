"""No function of the packages runs over 80 lines but those docs/ARCHITECTURE.md names.

The list is the section "Functions over 80 lines" of docs/ARCHITECTURE.md, one
``- `path::Qualified.name`: why`` line each, at most five; a function's length is its ``def`` line
to its last line (decorators excluded), nested functions counted on their own as well as in
their parent.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agents", "gpu_trading_env", "gpu_runtime")
MAX_LINES = 80
MAX_LONG = 5
SECTION = "## Functions over 80 lines"
ENTRY = re.compile(r"^- `([\w/.]+\.py)::([\w.]+)`:")


def function_lengths(source: str) -> dict[str, int]:
    """``{qualified name: lines}`` of every function of a module's ``source`` (methods as
    ``Class.name``, nested functions as ``outer.inner``)."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def package_functions() -> dict[str, int]:
    """``{"path::qualified name": lines}`` over every module of the packages."""
    found: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for name, n in function_lengths(path.read_text(encoding="utf-8")).items():
                found[f"{rel}::{name}"] = n
    return found


def allowed_long_functions() -> list[str]:
    """The ``path::name`` entries of ARCHITECTURE.md's section "Functions over 80 lines"."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert SECTION in text, f"docs/ARCHITECTURE.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return [f"{m[1]}::{m[2]}" for line in section.splitlines() if (m := ENTRY.match(line))]


def test_lengths_are_def_line_to_last_line() -> None:
    source = (
        "class A:\n    def f(self):\n\n        def g():\n            return 1\n        return g\n"
    )
    assert function_lengths(source) == {"A.f": 5, "A.f.g": 2}


def test_architecture_lists_at_most_five_existing_functions() -> None:
    allowed = allowed_long_functions()
    assert allowed, "the section lists no function (its lines read - `path::name`: why)"
    assert len(allowed) <= MAX_LONG, f"{len(allowed)} long functions listed: allowed are {MAX_LONG}"
    assert len(set(allowed)) == len(allowed), f"a function is listed twice: {allowed}"
    missing = sorted(set(allowed) - set(package_functions()))
    assert not missing, f"docs/ARCHITECTURE.md lists functions that do not exist: {missing}"


def test_no_function_over_80_lines_but_the_listed_ones() -> None:
    allowed = set(allowed_long_functions())
    long = {name: n for name, n in package_functions().items() if n > MAX_LINES}
    unlisted = sorted((n, name) for name, n in long.items() if name not in allowed)
    assert not unlisted, (
        f"functions over {MAX_LINES} lines that docs/ARCHITECTURE.md's section {SECTION!r} does "
        "not name (split them, or name them there with why): "
        + ", ".join(f"{name} ({n} lines)" for n, name in reversed(unlisted))
    )
