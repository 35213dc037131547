"""Sheaf-FMTL with CNNs on rotated MNIST (Sheaf-FMTL paper §4.2–4.3: Fig. 2, Fig. 3, Table 4).

Rotated MNIST-10k — the 10,000 real digits shipped with topofl — over 40 clients in 4 rotation
groups (0/90/180/270°), the paper's protocol (75/25 split, 80 % of the training data removed from
half the clients), Erdős–Rényi p = 0.15:

``same``     every client trains the same CNN; Sheaf-FMTL at γ ∈ {0.01, 0.03, 0.1, 0.3} against
             dFedU, D-PSGD and Local: accuracy vs rounds and vs transmitted bits (Fig. 2) and the
             cost columns of Table 4 (accuracy, bits, FLOPs, map memory); the budget's smallest γ
             also with the compact exchange (identical iterates, d_ij + 1 numbers per edge and
             iteration instead of 2·d_ij);
``same-common``  the same-size runs again with one common initial model (``model_init="common"``)
             instead of each client's own random start (the default, as the authors' public code
             builds one network per client; the paper does not say), paired against the default;
``hetero``   clients train the small, medium and large CNNs of the paper's Table 2 in turn
             (almost equal proportions, as §4.3 says): Sheaf-FMTL against Local (Fig. 3).

The same-size CNN of the full budget is the paper's (``cnn-same``: two 3×3 convolutions of 32 and
64 filters and one FC layer, 34,826 parameters — what Table 4's byte counts imply, see
:mod:`topofl.models.torch_models`); the quick and smoke budgets use Table 2's small CNN (23,210).

The paper's N(0, 1) maps would be dense matrices of d_ij × d_i numbers per edge — for the CNNs
hundreds of megabytes to gigabytes per edge — so the maps are stored compactly and exactly
(sparse-sign initial maps, rank-one updates; :mod:`topofl.decentralised.sheaf.maps`). A
sparse-sign map with entries ±σ has E[PᵀP] = σ²·I, an N(0, 1) map E[PᵀP] = d_ij·I; σ = √d_ij
matches the paper's second moment (for the heterogeneous mix, d_ij of the smallest edge space).
With such maps the coupling's curvature on the edge subspace is about d_i per neighbour, so the
θ-step (Eq. 27) is stable only for α·λ·d_i·deg(i) < 2 (Theorem 1's condition): the paper's
λ = 0.001 (its Table 1) at our α = 0.05 breaks it for the 23k-parameter CNN (measured: accuracy
0.12 after 80 rounds), so λ = 10⁻⁴ here — the same coupling as λ = 0.001 with α = 0.005.

Map memory: compact maps grow by one row of U and V per node and iteration, so a run's storage is
known before it starts (:func:`topofl.decentralised.sheaf.maths.budget_refusal` refuses a run that
would outgrow ``memory_budget``). Over the full budget's 200 iterations with float32 factors, 40
clients and seeds 0–2: 1.2 GB (γ = 0.01) to 3.2 GB (γ = 0.3) for ``cnn-same``, 4.0 GB for the
small/medium/large mix — all exact, under the 8 GB budget set here.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topofl.experiments.analysis import against
from topofl.experiments.store import RunSpec
from topofl.experiments.suite.base import PROFILES, Experiment, Manifest
from topofl.experiments.suite.sheaf import _curve_figure, _curves_with_bits, _final_rows, model_bytes

GAMMAS = (0.01, 0.03, 0.1, 0.3)
GRAPH = {"kind": "erdos_renyi", "p": 0.15}
HETERO = "cnn-small,cnn-medium,cnn-large"
#: budgets: iterations (one mini-batch step each, Algorithm 1), clients, same-size model, γ values
BUDGETS: dict[str, dict[str, Any]] = {
    "full": {"rounds": 200, "clients": 40, "model": "cnn-same", "gammas": GAMMAS, "hetero_gamma": 0.01, "per_client": None},
    "quick": {"rounds": 80, "clients": 40, "model": "cnn-small", "gammas": (0.01, 0.03), "hetero_gamma": 0.01, "per_client": None},
    "smoke": {"rounds": 3, "clients": 8, "model": "cnn-small", "gammas": (0.1,), "hetero_gamma": 0.1, "per_client": 40},
}
BASE_HP = {"lr": 0.05, "batch_size": 32}
#: compact exact maps in float32; at most 4 GB in any run of the full budget (module docstring)
SHEAF_HP = {**BASE_HP, "lam": 1e-4, "eta": 0.01, "maps": "compact", "map_init": "sparse_sign", "map_precision": "float32",
            "memory_budget": 8e9}
DFEDU_HP = {**BASE_HP, "lam": 0.05}
#: the CNNs' sizes on 1×28×28 inputs with 10 classes
MODEL_DIMS = {"cnn-small": 23_210, "cnn-medium": 123_562, "cnn-large": 212_146, "cnn-same": 34_826}
#: the label suffix and hyper-parameter of the runs from one common initial model
COMMON = (", common init", {"model_init": "common"})


def _sheaf_hp(gamma: float, model: str) -> dict[str, Any]:
    """Sheaf-FMTL's hyper-parameters: σ = √d_ij of the smallest edge space (see the module docstring)."""
    d_ij = max(1, int(gamma * min(MODEL_DIMS[m] for m in model.split(","))))
    return {**SHEAF_HP, "gamma": gamma, "map_scale": round(d_ij ** 0.5, 6)}


def _same_size(b: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], float]]:
    """(label, method, hyper-parameters, γ) of the same-size comparison (paper §4.2) at budget ``b``."""
    nan = float("nan")
    return ([(f"Sheaf-FMTL γ={g:g}", "sheaf", _sheaf_hp(g, b["model"]), g) for g in b["gammas"]]
            + [(label, m, hp, nan) for m, label, hp in (("dfedu", "dFedU", DFEDU_HP), ("dpsgd", "D-PSGD", BASE_HP), ("local-peers", "Local", BASE_HP))])


def plan(seeds: Sequence[int], profile: str = "full", data_root: str | None = None) -> list[RunSpec]:
    """Runs of ``sheaf-mnist`` at a budget: the same-size comparison and the heterogeneous one."""
    if data_root:
        raise ValueError("sheaf-mnist reads the shipped MNIST-10k; it takes no --data-root")
    b = BUDGETS[profile]
    data = {"n_clients": b["clients"], **({"samples_per_client": b["per_client"]} if b["per_client"] else {})}
    specs = []
    for s in seeds:
        g = b["gammas"][0]
        compact = (f"Sheaf-FMTL γ={g:g}, compact exchange", "sheaf", {**_sheaf_hp(g, b["model"]), "exchange": "compact"}, g)
        same = _same_size(b)
        for label, m, hp, g in [*same[: len(b["gammas"])], compact, *same[len(b["gammas"]) :]]:
            specs.append(RunSpec("sheaf-mnist", "mnist", m, s, b["rounds"], label=label, hyperparameters=hp, scenario_params=data,
                                 setting={"part": "same", "gamma": g}, graph=GRAPH, model=b["model"]))
        for label, m, hp, g in _same_size(b):  # the same runs from one common initial model
            specs.append(RunSpec("sheaf-mnist", "mnist", m, s, b["rounds"], label=label + COMMON[0], hyperparameters={**hp, **COMMON[1]},
                                 scenario_params=data, setting={"part": "same-common", "gamma": g}, graph=GRAPH, model=b["model"]))
        g = b["hetero_gamma"]
        specs.append(RunSpec("sheaf-mnist", "mnist", "sheaf", s, b["rounds"], label=f"Sheaf-FMTL γ={g:g} (hetero)",
                             hyperparameters=_sheaf_hp(g, HETERO), scenario_params=data, setting={"part": "hetero", "gamma": g}, graph=GRAPH,
                             model=HETERO))
        specs.append(RunSpec("sheaf-mnist", "mnist", "local-peers", s, b["rounds"], label="Local (hetero)", hyperparameters=BASE_HP,
                             scenario_params=data, setting={"part": "hetero", "gamma": float("nan")}, graph=GRAPH, model=HETERO))
    return specs


def analyse(out: Path, done: list[dict[str, Any]]) -> Manifest:
    """Table 4's columns, accuracy vs rounds and vs bits (Fig. 2), the heterogeneous comparison (Fig. 3)."""
    man = Manifest("sheaf-mnist", "Sheaf-FMTL with CNNs on rotated MNIST",
                   "Rotated MNIST-10k (real digits), 40 clients in 4 rotation groups, the paper's protocol, Erdős–Rényi p = 0.15; "
                   "same-size CNNs (paper §4.2, Fig. 2, Table 4) and the small/medium/large mix (§4.3, Fig. 3).")
    rows = _final_rows(done, ("part", "method", "gamma"), models=model_bytes(out))
    man.table(out, "summary", "Final mean test accuracy (mean ± std over seeds), transmitted data, FLOPs, map storage and storage of "
              "models plus maps (storage_MB, paper Table 3) per run (Table 4)", rows)
    labels = [r["method"] for r in rows]
    _curve_figure(out, _curves_with_bits(out), labels, "accuracy", "Accuracy against rounds and against transmitted data (paper Figs 2–3).", man)
    pairs = [r for part, local in (("same", "Local"), ("same-common", "Local" + COMMON[0]), ("hetero", "Local (hetero)"))
             for r in against([d for d in done if d["part"] == part], ("part",), local, "accuracy")]
    man.table(out, "paired_vs_local", "Each method minus Local (from one common initial model: minus Local from it): final accuracy "
              "paired over seeds (mean, 95 % t-interval, seeds won and lost; p: paired t-test, Holm-adjusted over the "
              "methods of one part)", pairs)
    common = against([{**d, "base": d["method"].removesuffix(COMMON[0]), "method": "common" if d["part"] == "same-common" else "independent"}
                      for d in done if d["part"] in ("same", "same-common")], ("base",), "independent", "accuracy", family=())
    man.table(out, "paired_common_init", "Each same-size method started from one common initial model minus the same method from each "
              "client's own random start (the default, as the authors' code): final accuracy paired over seeds (p: paired t-test, "
              "Holm-adjusted over every row of the table)", common)
    if common:
        man.notes.append("One common initial model instead of each client's own (paired over seeds, 95 % CI): " + "; ".join(
            f"{r['base']} {r['diff_mean']:+.3f} ({r['ci_low']:+.3f}, {r['ci_high']:+.3f})" for r in common) + ".")
    man.notes.append("What differs from the paper: 10,000 digits (250 per client before the protocol's reduction) instead of the full "
                     "MNIST; compact sparse-sign maps with the N(0, 1) maps' second moment instead of dense N(0, 1) maps (which would "
                     "not fit in memory for CNNs); λ = 10⁻⁴ instead of Table 1's 10⁻³ (at α = 0.05 the paper's value breaks Theorem 1's "
                     "step condition and diverges); one mini-batch step per iteration for every method (Algorithm 1); the budgets of "
                     "BUDGETS in topofl/experiments/suite/sheaf_mnist.py (the quick one: the small CNN, 80 iterations, γ ∈ {0.01, 0.03}; "
                     "the full one: the paper's same-size CNN, cnn-same, 200 iterations). The paper does not say how the clients' "
                     "models are initialised; by default each client starts from its own random initialisation, as in the authors' "
                     "public code, and the same-common rows start every client from one.")
    return man


EXPERIMENT = Experiment("sheaf-mnist", "Sheaf-FMTL with CNNs on rotated MNIST", plan, analyse, default_seeds=(0, 1, 2), profiles=PROFILES,
                        tunable=True)
