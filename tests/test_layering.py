"""Import rules that the import contracts (``[tool.importlinter]`` in pyproject.toml, checked by
``lint-imports`` in CI) do not state, checked on the source with ast.

The layers of both packages, the env never importing the agents and the parts of ``MarketData``
never importing it back are import-linter contracts; reads of another object's private members
are ruff's SLF001. What is left here: ``agents.algorithm.dqn_loss`` serves every gradient-step path and
imports neither package.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpu_runtime", "gpu_trading_env", "agents")


def runtime_imports(path: Path) -> list[str]:
    """Modules imported when ``path`` runs (imports under ``if TYPE_CHECKING:`` left out)."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            return
        if isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def test_the_loss_takes_q_values_only():
    """``agents.algorithm.dqn_loss`` serves every gradient-step path: it imports neither package."""
    bad = [
        m
        for m in runtime_imports(ROOT / "agents" / "algorithm" / "dqn_loss.py")
        if m.split(".")[0] in PACKAGES
    ]
    assert not bad, f"agents.algorithm.dqn_loss imports {bad}"


def test_the_import_contracts_list_no_exceptions():
    """Every import contract holds without exceptions: an import that goes against the layers is
    moved (or its dependency inverted), not listed in ``ignore_imports``."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    excepted = {c["id"]: c["ignore_imports"] for c in contracts if c.get("ignore_imports")}
    assert not excepted, f"import contracts with exceptions: {excepted}"
