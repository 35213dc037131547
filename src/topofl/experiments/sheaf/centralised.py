"""Server-based baselines on the rotated-digits clients of ``sheaf-digits`` (Sheaf-FMTL paper
Table 4's FedAvg, Ditto, pFedMe, Per-FedAvg; and pTopoFL), with the data each run transmitted.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import final_table
from topofl.experiments.base import Budget, Experiment, Manifest
from topofl.experiments.sheaf.digits import SEEDS
from topofl.job import Job

NAME = "sheaf-centralised"
CENTRAL = {"FedAvg": ("fedavg", {"lr": 0.5}), "Ditto": ("ditto", {"lr": 0.5}), "pFedMe": ("pfedme", {}),
           "Per-FedAvg": ("perfedavg", {"lr": 0.5}), "pTopoFL": ("ptopofl", {"lr": 0.5})}
FULL = Budget(rounds=100)
#: a CI smoke run: three rounds
SMOKE = Budget(rounds=3)


def plan(seeds: Sequence[int], budget: Budget = FULL) -> list[Job]:
    """The server-based methods of :data:`CENTRAL` on rotated digits (the server scenario ``digits``), per seed."""
    return [Job(experiment=NAME, data="digits", method=m, seed=s, rounds=budget.rounds, label=label, hyperparameters=hp)
            for s in seeds for label, (m, hp) in CENTRAL.items()]


def summary_rows(done: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Final accuracy and AUC per method, with the MB each run transmitted counted as float32."""
    rows = final_table(done, ("method",), ("accuracy", "auc"))
    for r in rows:
        r["transmitted_MB"] = float(np.mean([d["total_bytes"] for d in done if d["method"] == r["method"]]) / 2 / 1e6)
    return rows


def analyse(out: Path, done: list[dict[str, Any]], budget: Budget = FULL) -> Manifest:
    """Final accuracy table, with the data each run transmitted."""
    man = Manifest(NAME, "Server-based baselines on rotated digits",
                   f"The same rotated-digits clients as sheaf-digits, with a server: {budget.rounds} rounds of 2 local "
                   "epochs "
                   "(paper Table 4's FedAvg, Ditto, pFedMe, Per-FedAvg; and pTopoFL). Accuracy is the mean over "
                   "clients of each "
                   "client's accuracy with the model it would use.")
    man.table(out, "summary",
              "Final mean test accuracy (mean ± std over seeds); transmitted MB counted as float32, like sheaf-digits",
              summary_rows(done), ["method", "n_seeds", "accuracy_mean", "accuracy_std", "auc_mean", "transmitted_MB"])
    return man


EXPERIMENT = Experiment(NAME, "Server-based baselines on rotated digits", plan, analyse,
                        {"full": FULL, "smoke": SMOKE}, SEEDS)
