"""What the Sheaf-FMTL experiments share: final-row tables with communication and storage costs,
paired differences against a reference, and accuracy (or MSE) curves against rounds and bits.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import group_curves, num, paired_differences
from topofl.experiments.figures import pyplot, save


def sheaf_label(gamma: float) -> str:
    """The label of Sheaf-FMTL's run at ``gamma``."""
    return f"Sheaf-FMTL γ={gamma:g}"


def model_bytes(rounds: Iterable[Mapping[str, str]]) -> dict[tuple[str, int], int]:
    """(method label, seed) → bytes of all clients' models (d_i float64 numbers each), from the
    model sizes in rows of ``rounds.csv``: the model part of the paper's Table 3 storage, d_i + Σ_j d_ij·d_i.
    """
    dims: dict[tuple[str, int], dict[int, int]] = {}
    for r in rounds:
        dims.setdefault((r["method"], int(r["seed"])), {})[int(r["client"])] = int(r["dim"])
    return {k: 8 * sum(v.values()) for k, v in dims.items()}


def paired_vs(done: Sequence[Mapping[str, Any]], reference: str, metric: str = "accuracy",
              only: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Each method (or those in ``only``) minus ``reference``, paired over seeds: mean, 95 % t-interval, seeds won
    and lost, raw p and Holm's adjustment over the methods compared with ``reference``.
    """
    keep = [d for d in done if only is None or d["method"] in (*only, reference)]
    rows = []
    for r in paired_differences(keep, (), reference, metric):  # reference − other: flip to read "method − reference"
        rows.append({"method": r["method"], "versus": reference, "n_seeds": r["n_seeds"], "diff_mean": -r["diff_mean"],
                     "ci_low": -r["ci_high"], "ci_high": -r["ci_low"], "wins": r["other_wins"],
                     "losses": r["reference_wins"],
                     "p_value": r["p_value"], "p_holm": r["p_holm"], "n_comparisons": r["n_comparisons"]})
    return rows


def _costs(ds: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    return {
        "transmitted_bits": float(np.mean([d["final"]["cumulative_bits"] for d in ds])),
        "transmitted_MB": float(np.mean([d["final"]["cumulative_bits"] for d in ds]) / 8e6),
        "TFLOPs": float(np.mean([d["final"]["cumulative_flops"] for d in ds]) / 1e12),
        "map_storage_MB": float(np.mean([d["final"]["map_storage_bytes"] for d in ds]) / 1e6),
        "seconds_per_run": float(np.mean([d["seconds"] for d in ds])),
    }


def final_rows(done: Sequence[Mapping[str, Any]], by: Sequence[str], metric: str = "accuracy",
               models: Mapping[tuple[str, int], int] | None = None) -> list[dict[str, Any]]:
    """Mean and spread of the final metric and the costs per group; with ``models`` (:func:`model_bytes`)
    also ``storage_MB``: the models plus the restriction maps (the paper's Table 3 storage).
    """
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for d in done:
        groups.setdefault(tuple(str(d[b]) for b in by), []).append(d)
    rows = []
    for g, ds in groups.items():
        acc = np.array([num(d["final"][metric]) for d in ds])
        row: dict[str, Any] = dict(zip(by, g, strict=True))
        row.update({"n_seeds": len(ds), f"{metric}_mean": float(acc.mean()), f"{metric}_std": float(acc.std()),
                    **_costs(ds)})
        if models:
            storage = [num(d["final"]["map_storage_bytes"]) + models.get((d["method"], int(d["seed"])), np.nan)
                       for d in ds]
            row["storage_MB"] = float(np.mean(storage) / 1e6)
        rows.append(row)
    return rows


def curves_with_bits(rows: Sequence[Mapping[str, str]], metric: str = "accuracy") -> dict[tuple, dict[str, np.ndarray]]:
    """The metric over rounds per method (``rows``: curves.csv), each with its mean transmitted bits."""
    curves = group_curves(rows, ("method",), metric)
    bits = group_curves(rows, ("method",), "cumulative_bits")
    for k, c in curves.items():
        c["bits"] = bits[k]["mean"]
    return curves


def _style(label: str) -> str:
    """Line style: dashed baselines; Sheaf-FMTL variants (compact exchange: same accuracy, fewer bits) their own."""
    if not label.startswith("Sheaf"):
        return "--"
    return "-." if "compact exchange" in label else ":" if "shared maps" in label else "-"


def curve_figure(curves: Mapping[tuple, Mapping[str, np.ndarray]], labels: Sequence[str], out: Path, stem: str,
                 x_bits: bool = True,
                 metric: str = "accuracy") -> dict[str, str]:
    """The metric against rounds (± s.e. over seeds) and, with ``x_bits``, against transmitted bits."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2 if x_bits else 1, figsize=(14 if x_bits else 8.5, 4.2), squeeze=False)
    axes = axes[0]
    colours = [f"C{i}" for i in range(10)] if len(labels) <= 10 else [plt.get_cmap("tab20")(i) for i in range(20)]
    for i, lab in enumerate(labels):
        c = curves.get((lab,))
        if c is None:
            continue
        style, colour = _style(lab), colours[i % len(colours)]
        axes[0].plot(c["round"], c["mean"], style, label=lab, color=colour)
        axes[0].fill_between(c["round"], c["mean"] - c["se"], c["mean"] + c["se"], color=colour, alpha=0.15, lw=0)
        if x_bits and "bits" in c:
            if np.all(c["bits"] == 0):  # sends nothing: a reference line, as the paper's Local baseline
                axes[1].axhline(c["mean"][-1], ls=":", color=colour, label=f"{lab} (no communication)")
            else:
                axes[1].plot(c["bits"] / 8e6, c["mean"], style, label=lab, color=colour)
    what = "accuracy" if metric == "accuracy" else "MSE" if metric == "loss" else metric
    title = what.capitalize() if what != "MSE" else what
    axes[0].set(xlabel="round", ylabel=f"mean client test {what}", title=f"{title} vs rounds (± s.e. over seeds)")
    if x_bits:
        axes[1].set(xscale="log", xlabel="transmitted (MB, all directed messages; log)",
                    ylabel=f"mean client test {what}",
                    title=f"{title} vs transmitted bits")
    # beside the axes, not over the curves (the transmitted-bits panel fills its whole box)
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return save(fig, out, stem)
