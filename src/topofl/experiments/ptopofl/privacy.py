"""Privacy (pTopoFL paper §3.6, §4.6, Fig. 6): reconstruction risk ρ (Eqs. 10–11) and the MI proxy
log2(1 + dim·α) of the descriptor channel against gradient sharing, across client configurations
(n samples in R^d, a logistic model of p = d + 1 parameters) and for the healthcare hospitals.
These are the paper's dimension-counting proxies, computed exactly; they need no training runs.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.base import Experiment, Manifest
from topofl.experiments.figures import pyplot, save
from topofl.job import Job
from topofl.privacy.risk import ALPHA_C, client_privacy

NAME = "privacy"
M = 48


@dataclass(frozen=True)
class PrivacyBudget:
    """The grid of client configurations: sample counts and dimensions."""

    sizes: tuple[int, ...] = (50, 100, 200, 500, 1000)
    dims: tuple[int, ...] = (10, 20, 50)


FULL = PrivacyBudget()
#: a CI smoke run: two sizes, one dimension
SMOKE = PrivacyBudget(sizes=(50, 100), dims=(10,))


def plan(seeds: Sequence[int], budget: PrivacyBudget = FULL) -> list[Job]:
    """No runs: :func:`analyse` evaluates the privacy proxies directly."""
    return []


# ---- tables --------------------------------------------------------------------------------------
def grid_rows(budget: PrivacyBudget = FULL) -> list[dict[str, Any]]:
    """Risk and MI proxies of one upload for every (d, n) of the budget's grid."""
    grid = []
    for d in budget.dims:
        for n in budget.sizes:
            p = client_privacy(n, d, d + 1, M, ALPHA_C)
            grid.append({"n": n, "d": d, "p": d + 1, "risk_gradient": p["risk_gradient"],
                         "risk_descriptor": p["risk_descriptor"],
                         "ratio": p["risk_descriptor"] / p["risk_gradient"], "mi_gradient_bits": p["mi_gradient_bits"],
                         "mi_descriptor_bits": p["mi_descriptor_bits"]})
    return grid


def hospital_rows(fed: Any) -> list[dict[str, Any]]:
    """Risk and MI proxies of every client of federation ``fed``."""
    hosp = []
    for c in fed:
        n, d = c.X_train.shape
        hosp.append({"client": c.client_id, "n": n, "d": d, **client_privacy(n, d, d + 1, M, ALPHA_C)})
    return hosp


def hospital_note(hosp: Sequence[Mapping[str, Any]]) -> str:
    """Mean risks over hospitals and the MI proxy, beside the paper's numbers."""
    rg = float(np.mean([h["risk_gradient"] for h in hosp]))
    rt = float(np.mean([h["risk_descriptor"] for h in hosp]))
    return (f"Healthcare, mean over hospitals: ρ_grad = {rg:.4f}, ρ_topo = {rt:.4f}, ratio {rt / rg:.2f} "
            f"(paper: 0.0107, 0.0024, ratio 0.22). MI proxy: {hosp[0]['mi_gradient_bits']:.2f} vs "
            f"{hosp[0]['mi_descriptor_bits']:.2f} bits (paper: log2 22 = 4.46 vs log2 5.8 = 2.54).")


# ---- figures -------------------------------------------------------------------------------------
def privacy_figure(grid: Sequence[Mapping[str, Any]], budget: PrivacyBudget, out: Path) -> dict[str, str]:
    """Risk per upload against n, MI proxy and transmitted dimensions per d."""
    dims, sizes = budget.dims, budget.sizes
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for d in dims:
        sub = [g for g in grid if g["d"] == d]
        axes[0].loglog([g["n"] for g in sub], [g["risk_gradient"] for g in sub], "o-", label=f"gradient, d={d}")
        axes[0].loglog([g["n"] for g in sub], [g["risk_descriptor"] for g in sub], "s--", label=f"descriptor, d={d}")
    axes[0].set(xlabel="samples per client n", ylabel="reconstruction risk ρ", title="Risk per upload (Eqs. 10–11)")
    axes[0].legend(fontsize=7)
    x = np.arange(len(dims))
    axes[1].bar(x - 0.2, [grid[i * len(sizes)]["mi_gradient_bits"] for i in range(len(dims))], 0.4, label="gradient")
    axes[1].bar(x + 0.2, [grid[0]["mi_descriptor_bits"]] * len(dims), 0.4, label="descriptor")
    axes[1].set_xticks(x, [f"d={d}" for d in dims])
    axes[1].set(ylabel="bits", title="MI proxy log2(1 + dim·α)")
    axes[1].legend(fontsize=8)
    axes[2].bar(x - 0.2, [d + 1 for d in dims], 0.4, label="gradient (p = d + 1)")
    axes[2].bar(x + 0.2, [M] * len(dims), 0.4, label="descriptor (m = 48)")
    axes[2].set_xticks(x, [f"d={d}" for d in dims])
    axes[2].set(ylabel="numbers sent", title="Transmitted dimensions")
    axes[2].legend(fontsize=8)
    return save(fig, out, "privacy")


# ---- analysis ------------------------------------------------------------------------------------
CAVEAT = ("Caveat: pTopoFL uploads its model every round as well as the descriptor (Algorithm 1), so its total upload "
          "carries "
          "at least the gradient channel's risk; the lower figure applies to the descriptor channel alone. These "
          "proxies count "
          "dimensions; they are not differential-privacy guarantees (§3.6).")


def analyse(out: Path, done: list[dict[str, Any]], budget: PrivacyBudget = FULL) -> Manifest:
    """Proxies over the budget's grid and for the healthcare hospitals (seed 0): tables, notes, figure."""
    from topofl.data.scenarios import make_scenario

    man = Manifest(NAME, "Privacy: reconstruction risk",
                   "Reconstruction-risk and mutual-information proxies of §3.6 (paper Fig. 6).")
    grid = grid_rows(budget)
    man.table(out, "grid",
              "Risk of one upload by client configuration (gradient of a p = d + 1 logistic model vs 48-d descriptor, "
              "α_c = 0.1)", grid)
    hosp = hospital_rows(make_scenario("healthcare", seed=0))
    man.table(out, "healthcare_clients", "Healthcare hospitals (seed 0)", hosp)
    man.notes += [hospital_note(hosp), CAVEAT]
    man.figure(privacy_figure(grid, budget, out),
               "Reconstruction risk, MI proxy and transmitted dimensions (paper Fig. 6).")
    return man


EXPERIMENT = Experiment(NAME, "Privacy: reconstruction risk", plan, analyse, {"full": FULL, "smoke": SMOKE})
