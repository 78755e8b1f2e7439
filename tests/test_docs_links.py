"""Every relative link and every repository path named in README.md, CHANGELOG.md and docs/*.md
exists: a moved or deleted file fails here instead of leaving a dead path in the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "experiments" / "README.md",
     *(ROOT / "docs").glob("*.md")]
)  # fmt: skip
# Top-level folders of the repository: a path starting with one of them names a tracked file.
TOP = ("agents", "benchmarks", "docs", "examples", "experiments", "gpu_runtime",
       "gpu_trading_env", "tests", ".ci")  # fmt: skip

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(map(re.escape, TOP)) + r")/[\w./<>*{}$-]*)")
MODULE = re.compile(r"-m ((?:benchmarks|experiments|agents|gpu_trading_env)(?:\.\w+)+)")


def dead_paths(text: str, base: Path) -> list[str]:
    """The links (relative to ``base``, the page's folder) and the backticked repository paths
    and ``python -m`` modules (relative to the repository root) in ``text`` that do not exist.
    """
    dead = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = target.split("#", 1)[0]
        if not (base / path).exists():
            dead.append(target)
    for span in CODE.findall(text):
        for path in PATH.findall(span):
            path = path.rstrip(".")
            if any(c in path for c in "*<>{}$") or path.endswith("/-"):
                continue  # a pattern, a placeholder or a shell variable, not one file
            if not (ROOT / path).exists():
                dead.append(path)
        for module in MODULE.findall(span):
            stem = ROOT / module.replace(".", "/")
            if not (stem.with_suffix(".py").exists() or (stem / "__init__.py").exists()):
                dead.append(f"-m {module}")
    return dead


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_has_no_dead_path(page: Path) -> None:
    dead = dead_paths(page.read_text(), page.parent)
    assert not dead, f"{page.relative_to(ROOT)} names paths that do not exist: {dead}"


def test_the_check_finds_dead_links_paths_and_modules() -> None:
    text = (
        "[ok](ZOO.md) [ok](ZOO.md#figures) [web](https://example.org) [gone](NOPE.md)\n"
        "`benchmarks/soak.py` `benchmarks/gone.py --flag` `tests/test_soak.py::test_x` "
        "`docs/figures/walkforward_<name>/`\n"
        "```bash\npython3 -m benchmarks.soak && python3 -m experiments.gone\n```\n"
        "a path outside backticks is prose: benchmarks/also_gone.py\n"
    )
    assert dead_paths(text, ROOT / "docs") == [
        "NOPE.md",
        "benchmarks/gone.py",
        "-m experiments.gone",
    ]


def test_readme_stays_a_short_page() -> None:
    """README is a user's page: at most 150 lines and no table cell over 200 characters (the
    measurements live in docs/PERFORMANCE.md, itself at most 400 lines)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)
    cells = [c.strip() for line in lines if line.startswith("|") for c in line.split("|")]
    assert max(map(len, cells)) <= 200, max(cells, key=len)
    assert len((ROOT / "docs" / "PERFORMANCE.md").read_text().splitlines()) <= 400


def test_docs_stay_within_their_line_budget() -> None:
    """docs/ as a whole at most 1,800 lines: one page per topic with today's figures; history
    goes to CHANGELOG.md and experiments' findings to experiments/README.md."""
    total = sum(len(p.read_text().splitlines()) for p in (ROOT / "docs").glob("*.md"))
    assert total <= 1800, total


# Modules of benchmarks/ that the benchmarks import, not scripts of their own.
BENCHMARK_HELPERS = {"__init__.py", "run_info.py"}


def _benchmarks_run_from(script: Path, seen: set[str]) -> None:
    """Add to ``seen`` every benchmarks/ file that ``script`` runs, and what those run (a shell
    script may name a module by its stem alone, as gpu_suite.sh's sanitizer loop does)."""
    text = script.read_text()
    for path in sorted(ROOT.joinpath("benchmarks").iterdir()):
        stem = path.name.removesuffix(".py")
        bare = rf"\b{re.escape(stem)}\b" if script.suffix == ".sh" else r"(?!)"
        named = f"benchmarks/{path.name}" in text or re.search(
            rf"\bbenchmarks\.{re.escape(stem)}\b|{bare}", text
        )
        if path.name not in seen and named:
            seen.add(path.name)
            _benchmarks_run_from(path, seen)


def test_benchmarks_hold_only_what_performance_or_the_release_runs() -> None:
    """Every script in benchmarks/ is run by docs/PERFORMANCE.md or the release script
    (directly, or through a script they run); a one-question script belongs in experiments/."""
    seen: set[str] = set()
    _benchmarks_run_from(ROOT / "docs" / "PERFORMANCE.md", seen)
    _benchmarks_run_from(ROOT / "benchmarks" / "release_h200.sh", seen)
    scripts = {p.name for p in (ROOT / "benchmarks").iterdir() if p.is_file()}
    stray = sorted(scripts - seen - BENCHMARK_HELPERS - {"release_h200.sh"})
    assert not stray, f"benchmarks/ holds scripts nothing documented runs: {stray}"
