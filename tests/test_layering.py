"""The import rules of the package layout (docs/ARCHITECTURE.md), checked on the source with ast.

- ``gpu_trading_env`` never imports ``agents``;
- the GPU layer ``gpu_runtime`` imports neither package (only itself);
- inside ``gpu_trading_env``, a layer imports only the layers below it;
- no module reads a private attribute (``obj._name``) that only another package defines;
- ``agents.algorithm.dqn_loss`` imports neither package, and the parts ``MarketData`` is built from
  (``data.validation``, ``data.frames``, ``data.splits``) never import it at run time.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpu_runtime", "gpu_trading_env", "agents")
MODULES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))

# Layers of gpu_trading_env, lowest first; a module may import its own layer and those below.
ENV_LAYERS = {
    "gpu_runtime": 0,  # a package of its own, below both
    "gpu_trading_env.data": 1,
    "gpu_trading_env.core": 1,
    "gpu_trading_env.backends": 2,
    "gpu_trading_env": 3,  # the Gymnasium shells: vector_env, env, wrappers, render
    "gpu_trading_env.reports": 4,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute module an import statement names (function-level imports included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def layer(name: str) -> int | None:
    best = None
    for prefix, rank in ENV_LAYERS.items():
        if name == prefix or name.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, rank)
    return None if best is None else best[1]


def package(name: str) -> str:
    if name.startswith("gpu_runtime"):
        return "gpu"
    return name.split(".")[0]


def test_modules_found():
    names = {module_name(p) for p in MODULES}
    assert {"gpu_runtime.device", "agents.algorithm.gpu_dqn", "gpu_trading_env.vector_env"} <= names


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_imports_follow_the_layers(path: Path):
    me = module_name(path)
    bad = []
    for line, target in imports(path):
        root = target.split(".")[0]
        if root not in PACKAGES:
            continue
        if me.startswith("gpu_trading_env") and root == "agents":
            bad.append((line, target, "the env never imports agents"))
        elif package(me) == "gpu" and package(target) != "gpu":
            bad.append((line, target, "the GPU layer imports neither package"))
        elif me.startswith("gpu_trading_env") and target.startswith(
            ("gpu_trading_env.", "gpu_runtime")
        ):
            mine, theirs = layer(me), layer(target)
            # A name imported from a package __init__ resolves to a submodule or an object;
            # only submodules in a known layer are compared.
            if mine is not None and theirs is not None and theirs > mine:
                bad.append((line, target, f"layer {mine} imports layer {theirs}"))
    assert not bad, f"{me}: " + "; ".join(f"line {n}: {t} ({why})" for n, t, why in bad)


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


@pytest.mark.parametrize("part", ["validation", "frames", "splits"])
def test_market_data_parts_do_not_import_the_container(part: str):
    """``MarketData`` is built from these modules; they never import it back (no cycle)."""
    path = ROOT / "gpu_trading_env" / "data" / f"{part}.py"
    bad = [m for m in runtime_imports(path) if m.startswith("gpu_trading_env.data.market_data")]
    assert not bad, f"gpu_trading_env.data.{part} imports {bad}"


@functools.cache
def private_names(pkg: str) -> frozenset[str]:
    """``_names`` a package defines: methods, and attributes it assigns on ``self``."""
    names = set()
    for path in MODULES:
        if package(module_name(path)) != pkg:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return frozenset(n for n in names if n.startswith("_") and not n.startswith("__"))


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_no_private_attribute_of_another_package(path: Path):
    me = package(module_name(path))
    own = private_names(me)
    others = set().union(*(private_names(p) for p in ("gpu", *PACKAGES) if p != me)) - own
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in others
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            bad.append(f"line {node.lineno}: .{node.attr}")
    assert not bad, f"{module_name(path)} reads private attributes of another package: {bad}"


def test_the_old_gpu_package_name_warns_and_names_the_same_modules(monkeypatch):
    """Release 0.1.0's examples import ``gpu_trading_env.gpu.device``: it still resolves, to
    :mod:`gpu_runtime`'s own module objects, with a DeprecationWarning naming the new package."""
    import importlib
    import sys

    import gpu_runtime.device
    import gpu_runtime.philox

    for name in ("gpu_trading_env.gpu", "gpu_trading_env.gpu.device", "gpu_trading_env.gpu.philox"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.warns(DeprecationWarning, match="gpu_runtime"):
        old = importlib.import_module("gpu_trading_env.gpu.device")
    assert old is gpu_runtime.device
    assert importlib.import_module("gpu_trading_env.gpu.philox") is gpu_runtime.philox
