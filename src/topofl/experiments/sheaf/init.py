"""Sheaf-FMTL: initialisation of the restriction maps (Sheaf-FMTL paper Table 6), rotated digits, γ = 0.03."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topofl.experiments.base import Budget, Experiment, Manifest
from topofl.experiments.sheaf.common import final_rows
from topofl.experiments.sheaf.digits import DATA, GRAPH, GRAPH_PARAMS, SEEDS, SHEAF_HP
from topofl.job import Job

NAME = "sheaf-init"
INITS = {"gaussian N(0,1) (paper)": {"map_init": "gaussian", "map_scale": 1.0},
         "uniform U(−1,1)": {"map_init": "uniform", "map_scale": 1.0},
         "orthogonal": {"map_init": "orthogonal", "map_scale": 1.0},
         "identity + noise": {"map_init": "identity_noise", "map_scale": 0.1},
         "sparse sign (compact)": {"map_init": "sparse_sign", "map_scale": 1.0},
         "shared N(0,1) (P_ij⁰ = P_ji⁰)": {"map_init": "shared", "map_scale": 1.0}}
FULL = Budget(rounds=150)
#: a CI smoke run: five iterations
SMOKE = Budget(rounds=5)


def plan(seeds: Sequence[int], budget: Budget = FULL) -> list[Job]:
    """Sheaf-FMTL with every map initialisation of :data:`INITS`, per seed."""
    return [Job(experiment=NAME, data=DATA, method="sheaf", seed=s, rounds=budget.rounds, label=name,
                hyperparameters={**SHEAF_HP, "gamma": 0.03, **hp}, graph=GRAPH, graph_params=GRAPH_PARAMS)
            for s in seeds for name, hp in INITS.items()]


def analyse(out: Path, done: list[dict[str, Any]], budget: Budget = FULL) -> Manifest:
    """Final accuracy table by map initialisation."""
    man = Manifest(NAME, "Sheaf-FMTL: initialisation of the restriction maps",
                   f"Rotated digits, γ = 0.03, {budget.rounds} rounds (paper Table 6).")
    man.table(out, "summary", "Final mean test accuracy by map initialisation (mean ± std over seeds)",
              final_rows(done, ("method",)),
              ["method", "n_seeds", "accuracy_mean", "accuracy_std", "map_storage_MB"])
    return man


EXPERIMENT = Experiment(NAME, "Sheaf-FMTL: map initialisation", plan, analyse, {"full": FULL, "smoke": SMOKE},
                        SEEDS)
