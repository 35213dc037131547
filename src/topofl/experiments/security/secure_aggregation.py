"""Secure aggregation (SecAgg+): what it costs and what it hides. Plain and secure runs of pTopoFL and
FedAvg on healthcare (linear model) and on MNIST-10k (cnn-small, when torch is installed), paired over
seeds: final AUC / accuracy, time and bytes. The secure healthcare runs are probed
(:func:`probe`): the project's gradient-inversion and membership attacks on *everything the server
received* in each mode, and dropouts before and after masking. See docs/secure-aggregation.md.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import against, final_table, interval_text, t_interval
from topofl.experiments.base import Budget, Experiment, Manifest, server_logs
from topofl.experiments.figures import colour, pyplot, save
from topofl.job import Job

NAME = "secure-aggregation"
METHODS = ("ptopofl", "fedavg")
MODES = ("plain", "secure")
PROBE = "secure-aggregation"
#: the attack's favourable setting in the probe: one SGD step on one example from the model sent
ATTACK_LR = 0.1
#: a reconstruction counts as recovered below this relative error (as in privacy-attacks)
RECOVERED = 0.01


@dataclass(frozen=True)
class SecureBudget(Budget):
    """Rounds on healthcare; MNIST-10k's clients, samples and rounds for cnn-small (0 rounds: no cnn-small part)."""

    mnist_clients: int = 10
    mnist_samples: int = 10_000
    mnist_rounds: int = 5


BUDGETS = {
    "full": SecureBudget(),
    "quick": SecureBudget(rounds=5, mnist_clients=6, mnist_samples=3000, mnist_rounds=3),
    "smoke": SecureBudget(rounds=3, mnist_clients=4, mnist_samples=1000, mnist_rounds=2),
}


def torch_available() -> bool:
    """Whether the cnn-small part can run (the torch extra)."""
    return importlib.util.find_spec("torch") is not None


def plan(seeds: Sequence[int], budget: SecureBudget = BUDGETS["full"]) -> list[Job]:
    """Per seed, pTopoFL and FedAvg plain and secure: on healthcare (the secure runs probed), and on
    MNIST-10k with cnn-small (Dirichlet α = 0.5) when torch is installed and the budget has rounds for it.
    """
    jobs = []
    for s in seeds:
        for m in METHODS:
            for mode in MODES:
                setting: dict[str, Any] = {"algorithm": m, "part": "healthcare"}
                if mode == "secure":
                    setting["probe"] = PROBE
                jobs.append(Job(experiment=NAME, data="healthcare", method=m, seed=s, rounds=budget.rounds, label=mode,
                                hyperparameters={"secure_aggregation": mode == "secure"}, setting=setting))
        if budget.mnist_rounds > 0 and torch_available():
            for m in METHODS:
                for mode in MODES:
                    jobs.append(Job(
                        experiment=NAME, data="mnist", method=m, seed=s, rounds=budget.mnist_rounds, label=mode,
                        model="cnn-small",
                        data_params={"n_clients": budget.mnist_clients, "partition": "dirichlet", "alpha": 0.5,
                                     "n_samples": budget.mnist_samples},
                        hyperparameters={"secure_aggregation": mode == "secure", "lr": 0.05, "batch_size": 32,
                                         "local_epochs": 1},
                        setting={"algorithm": m, "part": "mnist cnn-small"}))
    return jobs


# ---- the probe: attacks on what the server received, and dropouts -------------------------------------
def _pool(fed: Any, method: str, hp: Mapping[str, Any], seed: int) -> tuple[Any, Any, Any]:
    from topofl.federation.pool import InProcessPool
    from topofl.federation.secure import Recorded
    from topofl.methods import build_server

    algorithm = build_server(method, dict(hp))
    model = algorithm.build_model(None, fed.task, fed.n_features, fed.n_classes)
    return algorithm, model, Recorded(InProcessPool(fed, algorithm, model, seed))


def _capture(fed: Any, method: str, hp: Mapping[str, Any], rounds: int, seed: int, wrap: Any = None
             ) -> tuple[Any, Any, Any, Any]:
    """Run ``method`` for ``rounds`` rounds with every reply recorded: (history, recorded pool, algorithm, model).
    The clients a dropout schedule makes vanish are logged at debug level only (they are the experiment).
    """
    import logging
    import warnings

    from topofl.federation.runner import run_rounds

    algorithm, model, pool = _pool(fed, method, hp, seed)
    quiet = [logging.getLogger(n) for n in ("topofl.federation.runner", "topofl.federation.secure")]
    levels = [lg.level for lg in quiet]
    try:
        for lg in quiet:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            history = run_rounds(wrap(pool) if wrap else pool, algorithm, model, rounds, seed)
    finally:
        for lg, level in zip(quiet, levels, strict=True):
            lg.setLevel(level)
    return history, pool, algorithm, model


def _received_views(pool: Any, rnd: int, secure: bool, q: Any) -> dict[int, np.ndarray]:
    """Per client, the vector the server received that stands for its model in round ``rnd``: the reply's
    model (plain), or its masked input decoded as one input and divided by its weight (secure).
    """
    out: dict[int, np.ndarray] = {}
    weights = {}
    for r_, stage, reply in pool.received:
        if r_ != rnd:
            continue
        if not secure and stage == "fit":
            out[reply.client_id] = np.asarray(reply.params, dtype=np.float64)
        elif secure and stage == "mask":
            out[reply.client_id] = q.decode(reply.vector[:-2], 1)
    if secure:
        for cid in out:
            weights[cid] = float(pool.pool.states[cid].get("secagg", {}).get("weight", 1.0))
        out = {cid: v / weights[cid] for cid, v in out.items()}
    return out


def _nearest_error(x_hat: np.ndarray, rows: np.ndarray) -> float:
    return float(min(np.linalg.norm(x_hat - r) / max(np.linalg.norm(r), 1e-12) for r in rows))


def _invert(update: np.ndarray, n_features: int) -> np.ndarray:
    from topofl.privacy.inversion import invert_single_gradient, update_to_gradient

    g = update_to_gradient(update, ATTACK_LR)
    if g[-1] == 0.0:
        return np.full(n_features, np.inf)
    x, _ = invert_single_gradient(g, np.zeros_like(g))
    return x[:n_features]   # pTopoFL's model also sees four TDA features: the raw row comes first


def group_means(history: Any, pool: Any, rnd: int) -> dict[str, tuple[list[int], np.ndarray]]:
    """Per group summed in round ``rnd``: its survivors and Σ w_k θ_k / Σ w_k of their models — what the
    secure server learned of it (computed here from the recorded models and the weights sent).
    """
    out = {}
    for g, entry in history.server_logs[rnd - 1].get("secure", {}).items():
        members = entry.get("survivors", [])
        if "abandoned" in entry or not members:
            continue
        w = {c: float(pool.pool.states[c]["secagg"]["weight"]) for c in members}
        out[g] = (members, sum(w[c] * pool.models[(rnd, c)] for c in members) / sum(w.values()))
    return out


def inversion_rows(fed: Any, method: str, seed: int) -> list[dict[str, Any]]:
    """The closed-form inversion (x = ∇_w / ∇_b; iDLG's label rule) on round 1 of each mode, in its most
    favourable setting (one SGD step on one example, no L2): per client, the relative error of the
    reconstruction from what the server received against the nearest of the client's training rows —
    plain: its model; secure: its masked input (decoded, divided by its weight) and its group's sum.
    """
    from topofl.federation.secure_client import quantiser

    hp = {"local_steps": 1, "batch_size": 1, "l2": 0.0, "lr": ATTACK_LR}
    n = fed.n_features
    rows: dict[int, np.ndarray] = {c.client_id: c.X_train for c in fed.clients}
    out: list[dict[str, Any]] = []
    for mode in MODES:
        secure = mode == "secure"
        history, pool, algorithm, _ = _capture(fed, method, {**hp, "secure_aggregation": secure}, 1, seed)
        views = _received_views(pool, 1, secure, quantiser(algorithm.config))
        for cid, v in sorted(views.items()):   # round 1 starts from the zero model for the linear model
            out.append({"seed": seed, "algorithm": method, "mode": mode,
                        "target": "its masked input" if secure else "its model",
                        "client": cid, "error": _nearest_error(_invert(v, n), rows[cid])})
        if secure:   # the group sums the server learns: the mean of the survivors' models
            for g, (members, mean) in group_means(history, pool, 1).items():
                x_hat = _invert(mean, n)
                out.append({"seed": seed, "algorithm": method, "mode": mode, "target": "its group's sum",
                            "client": -1, "group": g, "error": min(_nearest_error(x_hat, rows[c]) for c in members)})
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xC4A]))
    for cid in sorted(rows):   # chance: the same attack on a vector uniform in ±1 (the scale of a one-step update)
        guess = rng.uniform(-1.0, 1.0, algorithm.update_size())
        out.append({"seed": seed, "algorithm": method, "mode": "chance", "target": "a random vector", "client": cid,
                    "error": _nearest_error(_invert(guess, n), rows[cid])})
    return out


def membership_rows(fed: Any, method: str, hp: Mapping[str, Any], rounds: int, seed: int,
                    setting: str) -> list[dict[str, Any]]:
    """The loss-threshold membership attack (Yeom et al. 2018) on what the server received in the last round
    of training with ``hp``, per client (members: its training rows; non-members: its test rows):
    plain — the model it uploaded; secure — its masked input read as a model, and its group's mean.
    """
    from topofl.federation.pool import client_context
    from topofl.federation.secure_client import quantiser
    from topofl.metrics import evaluate
    from topofl.privacy.membership import example_losses, loss_threshold_attack

    out: list[dict[str, Any]] = []
    for mode in MODES:
        secure = mode == "secure"
        history, pool, algorithm, model = _capture(fed, method, {**hp, "secure_aggregation": secure}, rounds, seed)
        views = _received_views(pool, rounds, secure, quantiser(algorithm.config))
        targets: dict[str, dict[int, np.ndarray]] = {"its masked input" if secure else "its model": views}
        if secure:
            targets["its group's sum"] = {c: mean for members, mean in group_means(history, pool, rounds).values()
                                          for c in members}
        for target, thetas in targets.items():
            for c in fed.clients:
                if c.client_id not in thetas:
                    continue
                ctx = client_context(c, pool.pool.states[c.client_id], model, rounds, seed)
                losses = [example_losses(evaluate(model, thetas[c.client_id], algorithm.client_features(ctx, X), y)[1],
                                         y, model.task)
                          for X, y in ((c.X_train, c.y_train), (c.X_test, c.y_test))]
                res = loss_threshold_attack(losses[0], losses[1])
                out.append({"seed": seed, "setting": setting, "algorithm": method, "mode": mode, "target": target,
                            "client": c.client_id, "auc": float(res.auc)})
    return out


#: the membership attack's favourable training: long local training without regularisation (overfitting)
OVERFIT = {"local_epochs": 20, "l2": 0.0}


def dropout_rows(fed: Any, seed: int) -> list[dict[str, Any]]:
    """FedAvg's one secure group in round 1 with one to three clients vanishing before their masked input
    (``mask``) or after it (``unmask``): whether the round completed, and the largest distance between the
    server's model and the exact weighted mean of the inputs that arrived, against the quantisation bound.
    """
    from topofl.algorithms.base import cap_shares
    from topofl.federation.secure import Vanishing
    from topofl.federation.secure_client import quantiser

    ids = list(fed.client_ids)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xD0]))
    out = []
    for stage in ("mask", "unmask"):
        for k in (1, 2, 3):
            gone = sorted(int(c) for c in rng.choice(ids, size=k, replace=False))
            history, pool, algorithm, _ = _capture(fed, "fedavg", {"secure_aggregation": True}, 1, seed,
                                                   wrap=lambda p, g=gone, s=stage: Vanishing(p, {1: {c: s for c in g}}))
            entry = history.server_logs[0]["secure"]["0"]
            survivors = [c for c in ids if c not in gone] if stage == "mask" else ids
            shares = cap_shares(np.array([fed.clients[c].n_train for c in ids], float),
                                algorithm.config.max_client_weight)
            w = dict(zip(ids, (shares / shares.max()).tolist(), strict=True))
            expected = sum(w[c] * pool.models[(1, c)] for c in survivors) / sum(w[c] for c in survivors)
            step = quantiser(algorithm.config).step
            err = float(np.max(np.abs(history.server_params - expected)))
            out.append({"seed": seed, "vanished": "after its masked input" if stage == "unmask"
                        else "after sharing, before its masked input", "n_vanished": k,
                        "completed": "abandoned" not in entry, "survivors_in_sum": len(entry.get("survivors", [])),
                        "max_error_steps": err / step, "bound_steps": len(survivors) / 2})
    return out


def probe(params: Mapping[str, str], job: Any, result: Any, federation: Any) -> dict[str, Any]:
    """The secure-aggregation probe of a secure healthcare run: inversion and membership attacks on what
    the server received in each mode (``inversion``, ``membership``) and, for FedAvg, dropouts (``dropouts``).
    """
    hp = {k: v for k, v in dict(job.hyperparameters).items() if k != "secure_aggregation"}
    out = {
        "inversion": inversion_rows(federation, job.method, job.seed),
        "membership": (membership_rows(federation, job.method, hp, job.rounds, job.seed, "the job's training")
                       + membership_rows(federation, job.method, {**hp, **OVERFIT}, job.rounds, job.seed,
                                         "20 local epochs, no L2")),
    }
    if job.method == "fedavg":
        out["dropouts"] = dropout_rows(federation, job.seed)
    return out


# ---- analysis -------------------------------------------------------------------------------------
def _probe(done: Sequence[Mapping[str, Any]], part: str) -> list[dict[str, Any]]:
    return [dict(r) for d in done for r in d.get("probe", {}).get(part, [])]


def _per_seed(rows: Sequence[Mapping[str, Any]], by: Sequence[str], metric: str,
              reduce: Any = np.median) -> list[dict[str, Any]]:
    """Per group of ``by``: the per-seed ``reduce`` over clients of ``metric``, then mean and 95 % t-interval
    over seeds, and the share of clients below :data:`RECOVERED` for errors.
    """
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[b] for b in by), []).append(r)
    out = []
    for key, sub in groups.items():
        seeds = sorted({r["seed"] for r in sub})
        vals = [float(reduce([r[metric] for r in sub if r["seed"] == s])) for s in seeds]
        mean, lo, hi = t_interval(vals)
        row: dict[str, Any] = {**dict(zip(by, key, strict=True)), "n_seeds": len(seeds), "n_vectors": len(sub),
                               f"{metric}_mean": mean, f"{metric}_ci_low": lo, f"{metric}_ci_high": hi}
        if metric == "error":
            row["recovered_share"] = float(np.mean([r[metric] < RECOVERED for r in sub]))
        out.append(row)
    return out


def overhead(done: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per part and method: secure / plain seconds and bytes of the whole run, paired over seeds (mean, 95 %
    t-interval).
    """
    runs = {(d["part"], d["algorithm"], d["method"], d["seed"]): d for d in done}
    out = []
    for part, alg in dict.fromkeys((d["part"], d["algorithm"]) for d in done):
        seeds = sorted(s for (p, a, mode, s) in runs if (p, a, mode) == (part, alg, "secure")
                       and (part, alg, "plain", s) in runs)
        if not seeds:
            continue
        row: dict[str, Any] = {"part": part, "algorithm": alg, "n_seeds": len(seeds)}
        for key in ("seconds", "total_bytes"):
            ratio = [runs[(part, alg, "secure", s)][key] / max(runs[(part, alg, "plain", s)][key], 1e-12)
                     for s in seeds]
            mean, lo, hi = t_interval(ratio)
            row.update({f"{key}_plain": float(np.mean([runs[(part, alg, "plain", s)][key] for s in seeds])),
                        f"{key}_secure": float(np.mean([runs[(part, alg, "secure", s)][key] for s in seeds])),
                        f"{key}_ratio_mean": mean, f"{key}_ratio_ci_low": lo, f"{key}_ratio_ci_high": hi})
        out.append(row)
    return out


def group_counts(logs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per part and method, over the secure runs' rounds: rounds with a merged (or excluded) cluster, and
    groups abandoned unrevealed.
    """
    counts: dict[tuple[str, str], dict[str, Any]] = {}
    for e in logs:
        if e.get("experiment") != NAME or e.get("method") != "secure":
            continue
        row = counts.setdefault((str(e["part"]), str(e["algorithm"])), {
            "part": e["part"], "algorithm": e["algorithm"], "rounds": 0, "rounds_merged": 0, "rounds_excluded": 0,
            "groups_abandoned": 0})
        row["rounds"] += 1
        row["rounds_merged"] += int(bool(e.get("secure_merged")))
        row["rounds_excluded"] += int(bool(e.get("secure_excluded")))
        row["groups_abandoned"] += sum("abandoned" in g for g in e.get("secure", {}).values())
    return list(counts.values())


def attack_figure(inv: Sequence[Mapping[str, Any]], out: Path) -> dict[str, str]:
    """Relative reconstruction error of every vector attacked, per method and what was attacked (log scale)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.2))
    cats = list(dict.fromkeys((r["algorithm"], r["mode"], r["target"]) for r in inv))
    for i, (alg, mode, target) in enumerate(cats):
        errs = np.array([r["error"] for r in inv if (r["algorithm"], r["mode"], r["target"]) == (alg, mode, target)])
        errs = np.clip(errs[np.isfinite(errs)], 1e-16, None)
        jitter = np.random.default_rng(i).uniform(-0.18, 0.18, errs.size)
        ax.scatter(i + jitter, errs, s=9, alpha=0.6, color=colour(alg, METHODS.index(alg) if alg in METHODS else i))
    ax.axhline(RECOVERED, color="#444", ls=":", lw=1, label=f"recovered below {RECOVERED:g}")
    ax.set_yscale("log")
    ax.set_xticks(range(len(cats)), [f"{a}\n{m}:\n{t}" for a, m, t in cats], fontsize=7)
    ax.set(ylabel="relative error vs the nearest training row",
           title="Closed-form inversion on what the server received (round 1, one step on one example)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, out, "secure_aggregation_inversion")


TITLES = {
    "summary": "Final-round metrics per part, method and mode (mean ± std over seeds)",
    "paired": "Secure minus plain, final metric (AUC on healthcare, accuracy on MNIST), paired over seeds (mean, 95 % "
              "t-interval, seeds higher/lower; p: paired t-test, Holm-adjusted over the methods of a part)",
    "overhead": "Cost: secure / plain seconds and bytes of the whole run, paired over seeds (mean, 95 % t-interval)",
    "inversion": "Closed-form inversion (x = ∇_w/∇_b) on what the server received in round 1, one SGD step on one "
                 "example: relative error against the nearest training row (per-seed median over vectors; mean and "
                 "95 % t-interval over seeds) and the share of vectors recovered (error < 0.01)",
    "membership": "Loss-threshold membership attack on what the server received in the last round (train vs test "
                  "rows of each client), with the job's training and with the attack's favourable one (20 local "
                  "epochs, no L2): AUC (per-seed mean over clients; mean and 95 % t-interval over seeds; 0.5: chance)",
    "groups": "Secure runs: rounds in which a pTopoFL cluster below secure_min_group (3) was merged with its "
              "nearest, and groups abandoned unrevealed (sum over seeds and rounds)",
    "dropouts": "FedAvg's secure round with clients vanishing: largest |server model − exact weighted mean of the "
                "inputs that arrived|, in quantisation steps (step = 2 · 64 / (2^40 − 1) = 1.2e-10), against the bound "
                "m / 2 steps for m inputs",
}


def analyse(out: Path, done: list[dict[str, Any]], budget: SecureBudget = BUDGETS["full"]) -> Manifest:
    """Metrics, paired differences, cost, attacks and dropouts."""
    parts = sorted({d["part"] for d in done})
    man = Manifest(NAME, "Secure aggregation: cost and what the server can still learn",
                   f"pTopoFL and FedAvg, plain and with SecAgg+ (secure_aggregation=True: one secure sum per cluster "
                   f"for pTopoFL; defaults: every group member a neighbour, threshold 0.6, 40-bit fixed point over "
                   f"±64). healthcare: {budget.rounds} rounds, the linear model. "
                   + (f"MNIST-10k (Dirichlet α = 0.5, {budget.mnist_clients} clients, {budget.mnist_samples} "
                      f"images): cnn-small, {budget.mnist_rounds} rounds, one epoch a round."
                      if "mnist cnn-small" in parts else "The cnn-small part did not run (torch not installed, or "
                      "a budget without it)."))
    man.table(out, "summary", TITLES["summary"], final_table(done, ("part", "algorithm", "method"),
                                                              metrics=("auc", "accuracy")))
    paired = []
    for part in parts:
        metric = "auc" if part == "healthcare" else "accuracy"
        paired += [{"metric": metric, **r} for r in against([d for d in done if d["part"] == part],
                                                             ("part", "algorithm"), "plain", metric)]
    man.table(out, "paired", TITLES["paired"], paired)
    man.table(out, "overhead", TITLES["overhead"], overhead(done))
    groups = group_counts(server_logs(out))
    if groups:
        man.table(out, "groups", TITLES["groups"], groups)
        merged = [g for g in groups if g["rounds_merged"]]
        if merged:
            man.notes.append("Where a cluster was merged (the groups table), secure pTopoFL aggregates differently "
                             "from plain by design (docs/secure-aggregation.md, small clusters): its paired difference "
                             "then measures the small-cluster policy, not quantisation.")
    inv = _probe(done, "inversion")
    if inv:
        man.table(out, "inversion", TITLES["inversion"], _per_seed(inv, ("algorithm", "mode", "target"), "error"))
        man.figure(attack_figure(inv, out), "Each dot: one vector the server received (or a random one, chance), "
                   "attacked as a one-example update; dotted: the error below which a row counts as recovered; an "
                   "exact reconstruction (error 0) is drawn at 1e-16.")
    mem = _probe(done, "membership")
    if mem:
        man.table(out, "membership", TITLES["membership"], _per_seed(mem, ("setting", "algorithm", "mode", "target"),
                                                                     "auc", reduce=np.mean))
    drops = _probe(done, "dropouts")
    if drops:
        man.table(out, "dropouts", TITLES["dropouts"], drops)
        bad = [r for r in drops if not r["completed"] or r["max_error_steps"] > r["bound_steps"]]
        man.notes.append(f"Dropouts: {len(drops) - len(bad)} of {len(drops)} rounds completed with the survivors' "
                         "exact sum to within the quantisation bound." + (f" {len(bad)} did not." if bad else ""))
    for r in paired:
        man.notes.append(f"{r['part']}, {r['algorithm']}: secure − plain {r['metric']} {r['diff_mean']:+.2e} "
                         f"{interval_text(r['ci_low'], r['ci_high'], '+.2e', '95 % CI ')}, {r['n_seeds']} seeds.")
    return man


EXPERIMENT = Experiment(NAME, "Secure aggregation: cost and what the server can still learn", plan, analyse, BUDGETS,
                        default_seeds=tuple(range(5)))
