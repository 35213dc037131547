"""Aggregations of tidy results into tables (pure functions over rows of dicts)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


def num(v: Any) -> float:
    """``v`` as a float; NaN when it cannot be read as one (e.g. an empty CSV cell)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def group_curves(rows: Iterable[Mapping[str, str]], by: Sequence[str],
                 metric: str = "auc") -> dict[tuple, dict[str, np.ndarray]]:
    """``{group: {"round", "mean", "std", "n", "se", "low", "high"}}``: the metric over rounds — mean,
    std, standard error and 95 % Student-t interval (``low``–``high``, NaN with one seed) over seeds —
    for each combination of the ``by`` columns.
    """
    acc: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        acc[tuple(r[b] for b in by)][int(r["round"])].append(num(r[metric]))
    out = {}
    for g, per_round in acc.items():
        rounds = sorted(per_round)
        vals = [np.array(per_round[k]) for k in rounds]
        out[g] = {
            "round": np.array(rounds),
            "mean": np.array([np.nanmean(v) for v in vals]),
            "std": np.array([np.nanstd(v) for v in vals]),
            "n": np.array([np.sum(~np.isnan(v)) for v in vals]),
        }
        out[g]["se"] = out[g]["std"] / np.sqrt(np.maximum(out[g]["n"], 1))
        ci = np.array([t_interval(v.tolist())[1:] for v in vals]).reshape(-1, 2)
        out[g]["low"], out[g]["high"] = ci[:, 0], ci[:, 1]
    return out


def final_table(done: Sequence[Mapping[str, Any]], by: Sequence[str],
                metrics: Sequence[str] = ("auc", "accuracy", "pooled_auc")) -> list[dict[str, Any]]:
    """One row per group: mean and std over seeds of each final metric and of the convergence round."""
    groups: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for d in done:
        groups[tuple(d[b] for b in by)].append(d)
    rows = []
    for g, ds in groups.items():
        row: dict[str, Any] = dict(zip(by, g, strict=True))
        row["n_seeds"] = len(ds)
        for m in metrics:
            v = np.array([num(d["final"][m]) for d in ds])
            v = v[~np.isnan(v)]
            row[f"{m}_mean"] = float(v.mean()) if v.size else float("nan")
            row[f"{m}_std"] = float(v.std()) if v.size else float("nan")
        conv = np.array([d["convergence_round"] for d in ds], float)
        row["convergence_round_mean"] = float(conv.mean())
        row["seconds_per_run"] = float(np.mean([d["seconds"] for d in ds]))
        rows.append(row)
    return rows


def paired_t_p(diff: np.ndarray) -> float:
    """Two-sided p-value of the paired Student t-test that the mean of the per-seed differences
    ``diff`` is 0 (``scipy.stats.ttest_1samp``): NaN with fewer than two differences; with no
    spread at all, 1 when every difference is 0 and 0 when they are all the same non-zero value
    (the t statistic is then infinite).
    """
    from scipy.stats import t as student_t

    d = np.asarray(diff, dtype=float)
    if d.size < 2:
        return float("nan")
    if np.all(d == d[0]):
        return 1.0 if d[0] == 0 else 0.0
    # t = mean / (s / √n) with n − 1 degrees of freedom, as ttest_1samp computes it (written out: SciPy warns of
    # "precision loss" when the differences are nearly equal, where the statistic is still right)
    t = d.mean() / (d.std(ddof=1) / np.sqrt(d.size))
    return float(2.0 * student_t.sf(abs(t), d.size - 1))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (Holm 1979, "A simple sequentially rejective multiple test
    procedure", Scand. J. Statist. 6:65–70) of a family of p-values: sorted ascending,
    ``p_(i)`` becomes ``max_{j <= i} min(1, (m − j + 1) · p_(j))`` with m the number of finite
    p-values; NaN stays NaN and does not count in m. Rejecting where the adjusted p < α controls
    the family-wise error rate at α under any dependence between the tests.
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = finite.size
    running = 0.0
    for rank, i in enumerate(finite[np.argsort(p[finite], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


#: the family-wise significance level at which tables mark a difference (Holm-adjusted p below it)
ALPHA = 0.05


def add_holm(rows: list[dict[str, Any]], family: Sequence[str]) -> list[dict[str, Any]]:
    """Add ``p_holm`` (Holm-adjusted ``p_value``) and ``n_comparisons`` (the family's size) to
    ``rows`` in place, the family being the rows that share the ``family`` columns; returns ``rows``.
    """
    fams: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        fams[tuple(r.get(c) for c in family)].append(i)
    for idx in fams.values():
        adjusted = holm([rows[i]["p_value"] for i in idx])
        m = sum(np.isfinite(rows[i]["p_value"]) for i in idx)
        for i, a in zip(idx, adjusted, strict=True):
            rows[i]["p_holm"] = a
            rows[i]["n_comparisons"] = int(m)
    return rows


def paired_differences(
    done: Sequence[Mapping[str, Any]],
    by: Sequence[str],
    reference: str,
    metric: str = "accuracy",
    level: float = 0.95,
    family: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Paired differences ``reference − other`` of a final metric over the seeds both ran.

    For each group of the ``by`` columns (which must not include ``method``; experiments that run
    one method in several settings store each setting's label there) and each method other than
    ``reference``: the per-seed differences ``d_s = m_ref(s) − m_other(s)`` on the
    seeds where both have a finite value, their mean, a Student-t confidence interval at
    ``level`` (NaN with fewer than two seeds), on how many seeds each one wins (ties count for
    neither), the paired t-test's two-sided ``p_value`` (:func:`paired_t_p`) and ``p_holm``, the
    p-value adjusted by Holm's method over the family of the group's comparisons — ``reference``
    against each other method of the same ``by`` group, for this metric (``n_comparisons`` of
    them; :func:`holm`) — or, with ``family``, over the rows sharing those of the ``by`` columns
    (``()``: every row, the whole table of this metric). Pairing removes the seed-to-seed
    variation both methods share (same data, same split).
    """
    if "method" in by:
        raise ValueError("by must not include 'method': the differences are between methods")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    per: dict[tuple, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for d in done:
        per[tuple(d[b] for b in by)][d["method"]][int(d["seed"])] = num(d["final"][metric])
    rows = []
    for g, methods in per.items():
        ref = methods.get(reference)
        if ref is None:
            continue
        for m, vals in methods.items():
            if m != reference:
                row: dict[str, Any] = dict(zip(by, g, strict=True))
                row.update({"method": m, "reference": reference, "metric": metric, **_paired_stats(ref, vals, level)})
                rows.append(row)
    return add_holm(rows, by if family is None else family)


def _paired_stats(ref: Mapping[int, float], vals: Mapping[int, float], level: float) -> dict[str, Any]:
    """``ref − vals`` over the seeds where both are finite: count, mean, t-interval, wins each way, paired t-test p."""
    from scipy.stats import t as student_t

    seeds = sorted(s for s in set(ref) & set(vals) if np.isfinite(ref[s]) and np.isfinite(vals[s]))
    diff = np.array([ref[s] - vals[s] for s in seeds])
    n = diff.size
    mean = float(diff.mean()) if n else float("nan")
    half = float(student_t.ppf(0.5 + level / 2, n - 1) * diff.std(ddof=1) / np.sqrt(n)) if n >= 2 else float("nan")
    return {"n_seeds": n, "diff_mean": mean, "ci_low": mean - half, "ci_high": mean + half,
            "reference_wins": int(np.sum(diff > 0)), "other_wins": int(np.sum(diff < 0)), "p_value": paired_t_p(diff)}


def against(
    done: Sequence[Mapping[str, Any]],
    by: Sequence[str],
    baseline: str,
    metric: str = "auc",
    level: float = 0.95,
    family: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Each method minus ``baseline`` (``method − baseline``, so positive means a higher metric than
    the baseline), paired over seeds: :func:`paired_differences` read the other way round, with
    ``wins`` (seeds where the method is higher) and ``losses``, and the same raw and Holm-adjusted
    p-values (the family: every method against ``baseline`` within one ``by`` group, or as ``family`` says).
    """
    rows = []
    for p in paired_differences(done, by, baseline, metric, level, family):
        r = {k: v for k, v in p.items()
             if k not in ("reference", "reference_wins", "other_wins", "diff_mean", "ci_low", "ci_high", "p_value",
                          "p_holm", "n_comparisons")}
        r.update({"versus": baseline, "diff_mean": -p["diff_mean"], "ci_low": -p["ci_high"], "ci_high": -p["ci_low"],
                  "wins": p["other_wins"], "losses": p["reference_wins"], "p_value": p["p_value"],
                  "p_holm": p["p_holm"],
                  "n_comparisons": p["n_comparisons"]})
        rows.append(r)
    return rows


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean of the finite ``values`` and its Student-t confidence interval at ``level``
    (the interval is NaN with fewer than two values).
    """
    from scipy.stats import t as student_t

    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float)
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(v.mean())
    if v.size < 2:
        return mean, float("nan"), float("nan")
    half = float(student_t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return mean, mean - half, mean + half


def interval_text(low: float, high: float, fmt: str = "+.3f", prefix: str = "") -> str:
    """``"(low, high)"`` of a confidence interval (``prefix`` before the numbers, e.g. ``"95 % CI "``),
    or ``"(one seed: no interval)"`` when it is NaN (fewer than two seeds: :func:`t_interval`), so
    that no "(+nan, +nan)" reaches a note or the console.
    """
    if not (np.isfinite(low) and np.isfinite(high)):
        return "(one seed: no interval)"
    return f"({prefix}{low:{fmt}}, {high:{fmt}})"


def best_method(done: Sequence[Mapping[str, Any]], metric: str = "auc", level: float = 0.95,
                higher_is_better: bool = True) -> dict[str, Any]:
    """The method ahead of every other on the final ``metric``, and whether it is distinguishable from each.

    ``done`` holds one group's done-records (``method``: the method or its label, ``seed``, ``final``).
    Methods are compared in pairs on the seeds both ran (:func:`paired_differences`, Student-t
    interval at ``level``), never on means over different seeds: the ``leader`` is the method whose
    smallest paired lead over another method is the largest. It is ``best`` only when its paired
    interval against EVERY other method excludes 0 on the better side; otherwise ``best`` is ``None``
    (a lead of 0.001 on a few seeds, or a clear lead over the runner-up but not over a noisy third,
    names nobody). ``runner_up`` is the method the leader is least clearly ahead of (the lowest
    interval bound), and ``diff_mean``, ``ci_low``, ``ci_high``, ``n_seeds`` are ``leader − runner_up``
    in the metric's units (negative for a lower-is-better metric whose leader is lower). Returns
    ``{"best", "leader", "runner_up", "diff_mean", "ci_low", "ci_high", "n_seeds", "higher_is_better"}``
    (``leader``/``runner_up`` ``None`` with fewer than two methods).
    """
    values: dict[str, list[float]] = defaultdict(list)
    for d in done:
        values[d["method"]].append(num(d["final"][metric]))
    methods = [m for m, v in values.items() if np.any(np.isfinite(v))]
    nan = float("nan")
    if len(methods) < 2:
        return {"best": None, "leader": next(iter(methods), None), "runner_up": None, "diff_mean": nan, "ci_low": nan,
                "ci_high": nan, "n_seeds": 0, "higher_is_better": higher_is_better}
    sign = 1.0 if higher_is_better else -1.0
    pairs: dict[str, dict[str, dict[str, Any]]] = {}   # method -> other -> paired stats of method − other
    for m in methods:
        rows = paired_differences([d for d in done if d["method"] in methods], (), m, metric, level)
        pairs[m] = {r["method"]: r for r in rows}

    def lead(m: str, o: str) -> float:
        """How far ``m`` is ahead of ``o`` on the seeds both ran (better side positive; NaN as no lead)."""
        x = sign * pairs[m][o]["diff_mean"]
        return float(x) if np.isfinite(x) else -np.inf

    def margin(m: str, o: str) -> float:
        """The better-side lower bound of ``m − o``'s interval (NaN, one seed: no margin)."""
        r = pairs[m][o]
        x = r["ci_low"] if higher_is_better else -r["ci_high"]
        return float(x) if np.isfinite(x) else -np.inf

    def order(m: str) -> tuple[float, float]:
        others = [o for o in methods if o != m]
        return min(lead(m, o) for o in others), float(np.mean([lead(m, o) for o in others]))

    leader = max(methods, key=order)
    others = [o for o in methods if o != leader]
    runner = min(others, key=lambda o: (margin(leader, o), lead(leader, o)))
    row = pairs[leader][runner]
    clear = all(margin(leader, o) > 0 for o in others)
    return {"best": leader if clear else None, "leader": leader, "runner_up": runner, "diff_mean": row["diff_mean"],
            "ci_low": row["ci_low"], "ci_high": row["ci_high"], "n_seeds": row["n_seeds"],
            "higher_is_better": higher_is_better}


def best_text(b: Mapping[str, Any], metric: str = "AUC") -> str:
    """One sentence on :func:`best_method`'s answer: the best method with its lead over the method it is
    least clearly ahead of (paired, 95 % interval), or why no method is: the interval against that
    method includes 0, lies on the wrong side, or cannot be computed (one shared seed).
    """
    if b["leader"] is None:
        return "no results"
    if b["runner_up"] is None:
        return f"{b['leader']} alone"
    higher = b.get("higher_is_better", True)
    low, high = b["ci_low"], b["ci_high"]
    lead = (f"{b['leader']} − {b['runner_up']} {b['diff_mean']:+.3f} "
            f"{interval_text(low, high, prefix='95 % CI ')}" + ("" if higher else ", lower is better"))
    if b["best"] is not None:
        return f"best: {b['best']} ({lead}, paired over {b['n_seeds']} seeds)"
    if not (np.isfinite(low) and np.isfinite(high)):
        why = f"{b['n_seeds']} shared seed{'s' if b['n_seeds'] != 1 else ''}: no interval"
    elif low <= 0 <= high:
        why = "the interval includes 0"
    else:
        why = f"{b['runner_up']} is ahead on the seeds both ran"
    return f"no method is distinguishable from every other (closest: {lead}; {why})"


def paired_curves(
    rows: Iterable[Mapping[str, str]], by: Sequence[str], baseline: str, metric: str = "auc", level: float = 0.95,
) -> dict[tuple, dict[str, np.ndarray]]:
    """Per round, each method's ``metric`` minus ``baseline``'s on the same seed: ``{(group...,
    method): {"round", "mean", "low", "high", "n"}}`` (mean and Student-t interval over seeds).

    ``rows`` are per-(method, seed, round) curve rows carrying the ``by`` columns, ``method``,
    ``seed``, ``round`` and ``metric``. Seed difficulty is shared by the methods, so these curves
    show differences that raw bands over seeds hide.
    """
    val: dict[tuple, dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        val[tuple(r[b] for b in by) + (r["method"],)][int(r["round"])][int(r["seed"])] = num(r[metric])
    out = {}
    for key, per_round in val.items():
        base = val.get(key[:-1] + (baseline,))
        if key[-1] == baseline or base is None:
            continue
        rounds, stats = [], []
        for k in sorted(per_round):
            diffs = [v - base[k][s] for s, v in per_round[k].items() if s in base.get(k, {})]
            rounds.append(k)
            stats.append((*t_interval(diffs, level), sum(np.isfinite(diffs))))
        a = np.array(stats, dtype=float).reshape(-1, 4)
        out[key] = {"round": np.array(rounds), "mean": a[:, 0], "low": a[:, 1], "high": a[:, 2], "n": a[:, 3]}
    return out


def detection_scores(flagged: Iterable[int], adversarial: Iterable[int]) -> dict[str, float]:
    """Precision and recall of flagged clients against the truly adversarial ones.

    Precision is NaN when nothing is flagged; recall is NaN when there is no adversary.
    """
    f, a = set(flagged), set(adversarial)
    tp = len(f & a)
    return {
        "precision": tp / len(f) if f else float("nan"),
        "recall": tp / len(a) if a else float("nan"),
        "n_flagged": float(len(f)),
    }
