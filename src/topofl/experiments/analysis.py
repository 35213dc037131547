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


def group_curves(rows: Iterable[Mapping[str, str]], by: Sequence[str], metric: str = "auc") -> dict[tuple, dict[str, np.ndarray]]:
    """``{group: {"round", "mean", "std", "n", "se"}}``: the metric over rounds — mean, std and
    standard error over seeds — for each combination of the ``by`` columns.
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
    return out


def final_table(done: Sequence[Mapping[str, Any]], by: Sequence[str], metrics: Sequence[str] = ("auc", "accuracy", "pooled_auc")) -> list[dict[str, Any]]:
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


def paired_differences(
    done: Sequence[Mapping[str, Any]],
    by: Sequence[str],
    reference: str,
    metric: str = "accuracy",
    level: float = 0.95,
) -> list[dict[str, Any]]:
    """Paired differences ``reference − other`` of a final metric over the seeds both ran.

    For each group of the ``by`` columns (which must not include ``method``; experiments that run
    one method in several settings store each setting's label there) and each method other than
    ``reference``: the per-seed differences ``d_s = m_ref(s) − m_other(s)`` on the
    seeds where both have a finite value, their mean, a Student-t confidence interval at
    ``level`` (NaN with fewer than two seeds), and on how many seeds each one wins (ties count for neither).
    Pairing removes the seed-to-seed variation both methods share (same data, same split).
    """
    from scipy.stats import t as student_t

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
            if m == reference:
                continue
            seeds = sorted(s for s in set(ref) & set(vals) if np.isfinite(ref[s]) and np.isfinite(vals[s]))
            diff = np.array([ref[s] - vals[s] for s in seeds])
            n = diff.size
            mean = float(diff.mean()) if n else float("nan")
            half = float(student_t.ppf(0.5 + level / 2, n - 1) * diff.std(ddof=1) / np.sqrt(n)) if n >= 2 else float("nan")
            row: dict[str, Any] = dict(zip(by, g, strict=True))
            row.update({"method": m, "reference": reference, "metric": metric, "n_seeds": n, "diff_mean": mean,
                        "ci_low": mean - half, "ci_high": mean + half, "reference_wins": int(np.sum(diff > 0)),
                        "other_wins": int(np.sum(diff < 0))})
            rows.append(row)
    return rows


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
