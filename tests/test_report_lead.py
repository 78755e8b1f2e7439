"""Every report's first sentence (``gpu_trading_env.reports.report.lead_sentence``): at most
:data:`LEAD_WORDS` words, the deployed policy named, its out-of-sample figures beside flat,
buy-and-hold and (on synthetic data) the known rule; the page opens with it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agents.cli.report import PortfolioPage, portfolio_lead, single_lead
from agents.cli.walkforward import walkforward_lead
from agents.pipelines.deployment import OUTCOMES, describe_deployment, describe_unconfirmed
from gpu_trading_env.reports.report import LEAD_WORDS, lead_sentence, write_html
from tests.test_deployment import OUTCOME_CASES, baseline

AGENT = {"total_return": 56.196, "sharpe": 20.0896}
HOLD = {"total_return": 0.0249, "sharpe": 0.354}
RULE = {"total_return": 58.761, "sharpe": 20.0615}


def _metrics(m: dict) -> SimpleNamespace:
    return SimpleNamespace(to_dict=lambda: dict(m), **m)


def _backtest() -> SimpleNamespace:
    return SimpleNamespace(strategy=_metrics(AGENT), benchmark=_metrics(HOLD))


def _deployments() -> list:
    """One deployment of each outcome of :data:`OUTCOMES`."""
    out = []
    for kept, base, g, sel, fb in OUTCOME_CASES:
        out.append(describe_deployment(kept, baseline(base), gate=g, selection=sel, fallback=fb))
    out.append(describe_unconfirmed(out[2], "hold long", -0.01, 0.0, first_fold=False))
    assert {d.outcome for d in out} == set(OUTCOMES)
    return out


def _words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("deployment", _deployments(), ids=lambda d: d.outcome)
def test_train_lead_names_the_policy_and_its_out_of_sample_figures(deployment) -> None:
    rule = SimpleNamespace(strategy=_metrics(RULE))
    lead = single_lead(deployment.policy, _backtest(), rule)
    assert _words(lead) <= LEAD_WORDS, lead
    assert lead.startswith(f"Deployed {deployment.policy}: out of sample +5,619.6% (Sharpe 20.09)")
    assert "buy-and-hold +2.5% (Sharpe 0.35)" in lead
    assert "known rule +5,876.1% (Sharpe 20.06)" in lead
    # Flat is named as a comparison unless it is what was deployed.
    assert ("vs flat +0.0%" in lead) == (deployment.kept != "flat"), lead
    assert deployment.policy.split()[0] in ("a", "flat", "hold"), deployment.policy
    # Real data: no known rule, nothing said of one.
    assert "known rule" not in single_lead(deployment.policy, _backtest(), None)


def test_walkforward_lead_counts_the_networks_deployed() -> None:
    folds = [
        SimpleNamespace(seeds=[{"kept": "network"}, {"kept": "flat"}]),
        SimpleNamespace(seeds=[{"kept": "network"}, {"kept": "network"}]),
    ]
    agg = {"ensemble": AGENT, "buy_and_hold": HOLD, "rule": RULE}
    lead = walkforward_lead(SimpleNamespace(folds=folds, aggregate=agg))
    assert _words(lead) <= LEAD_WORDS, lead
    assert lead.startswith("Deployed a network in 3 of 4 fold runs, else a baseline:")
    assert "+5,619.6% (Sharpe 20.09) vs flat +0.0%, buy-and-hold +2.5%" in lead
    folds = [SimpleNamespace(seeds=[{"kept": "flat"}])] * 3
    lead = walkforward_lead(SimpleNamespace(folds=folds, aggregate={**agg, "rule": None}))
    assert lead.startswith("Deployed no network (flat) in all 3 fold runs:"), lead
    assert "known rule" not in lead and _words(lead) <= LEAD_WORDS


@pytest.mark.parametrize("deployed", ["a network", "flat (no validated edge)"])
def test_portfolio_lead_names_the_policy_and_its_figures(deployed: str) -> None:
    page = PortfolioPage("t", "out-of-sample", "v", [], (None, ""), [], {}, 1.0, deployed=deployed)
    first = "kept (network)" if deployed == "a network" else "kept (flat)"
    second = ("flat", {"total_return": 0.0, "sharpe": float("nan")})
    if deployed != "a network":
        second = ("network (not kept)", {"total_return": -0.03, "sharpe": -0.4})
    figures = [(first, AGENT), second, ("equal-weight buy and hold", HOLD)]
    lead = portfolio_lead(page, figures)
    assert _words(lead) <= LEAD_WORDS, lead
    assert lead.startswith(f"Deployed {deployed}: out of sample +5,619.6% (Sharpe 20.09) vs")
    assert "equal-weight buy-and-hold +2.5% (Sharpe 0.35)" in lead
    assert ("flat +0.0%" in lead) == (deployed == "a network"), lead


def test_the_page_opens_with_the_lead(tmp_path) -> None:
    lead = lead_sentence("a network", AGENT, {"buy-and-hold": HOLD})
    page = write_html(tmp_path, "t", ["a note"], [["series"], ["x"]], [], lead=lead).read_text()
    body = page.split("<h1>t</h1>", 1)[1].lstrip()
    assert body.startswith(f'<p class="lead"><strong>{lead}</strong></p>')
    assert body.index(lead) < body.index("a note")
