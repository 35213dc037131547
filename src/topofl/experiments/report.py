"""A self-contained HTML report of an experiments directory (figures embedded, tables inline).

Tables are drawn from the tidy CSV files beside the report, formatted one column at a time:
integers as integers, rounds and seconds to one decimal, metrics to three decimals (three
significant figures below 0.01), differences signed; ``x_mean``/``x_std`` become one "mean ± std"
column, ``x_mean``/``x_ci_low``/``x_ci_high`` one "mean (95 % CI)" column and win/loss counts one
"won/lost" column, so that every table fits a 760-pixel window. Each experiment's settings (runs,
rounds, models, hyper-parameters that differ from the defaults) follow its results; the defaults
of every method used, the git commit and the package versions close the report.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from topofl.experiments.analysis import ALPHA
from topofl.experiments.results import read_csv

ORDER = (
    "comparison", "paper-protocol", "controls", "heart-disease", "robustness", "attacks", "continual", "privacy",
    "privacy-attacks", "privacy-dp", "secure-aggregation",
    "ablation", "ptopofl-options", "diagrams",
    "sheaf-digits", "sheaf-school", "sheaf-centralised", "sheaf-hetero", "sheaf-topology", "sheaf-init",
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1180px;margin:2em auto;\
padding:0 1em;color:#222;line-height:1.45}
h1{border-bottom:3px solid #1b9e77;padding-bottom:.3em}h2{margin-top:2.2em;border-bottom:1px solid #ccc}
.tw{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:.8em 0 1.6em;font-size:.82em}\
th,td{border:1px solid #ddd;padding:.22em .45em;text-align:right}
th{background:#f3f6f4;font-weight:600;vertical-align:bottom}td{white-space:nowrap}
td:first-child,th:first-child{text-align:left}\
td.t{text-align:left;white-space:normal;min-width:5em;overflow-wrap:anywhere}
@media (max-width:900px){body{padding:0 .5em}table{font-size:.74em}th,td{padding:.2em .3em}}
caption{caption-side:top;text-align:left;font-weight:600;padding:.3em 0}
figure{margin:1em 0 2em}figure img{max-width:100%;height:auto;border:1px solid #eee}\
figcaption{font-size:.9em;color:#555}
.ci{color:#555;font-size:.9em}tr.sig td{font-weight:600}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.5em .8em;margin:.6em 0}.meta{color:#666;font-size:.9em}
.budgetnote{background:#fdecea;border-left:4px solid #a40000;padding:.5em .8em;margin:.6em 0}\
.budget{color:#a40000;font-weight:600}
details{margin:.4em 0 1.2em}summary{cursor:pointer;color:#155;font-size:.92em}
nav a{margin-right:1em;white-space:nowrap}code{font-size:.92em}
"""


def _num(v: str) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _kind(name: str, values: list[str]) -> str:
    """How a column's numbers are written: ``text``, ``int``, ``one`` (one decimal), ``big`` (no
    decimals, thousands separated), ``small`` (every value below 0.01: three significant figures),
    ``diff`` (signed, three decimals) or ``metric`` (three decimals).
    """
    if _is_p(name):
        return "p"
    nums = [f for f in (_num(v) for v in values) if f is not None and math.isfinite(f)]
    if not nums:
        return "text" if any(_num(v) is None and v for v in values) else "metric"
    if _integers(nums, values):
        return "int"
    low = name.lower()
    if any(w in low for w in ("round", "second", "epoch", "step")):
        return "one"
    return _magnitude_kind(low, max(abs(f) for f in nums))


def _integers(nums: list[float], values: list[str]) -> bool:
    """Whether the column holds integers: every number is one, and either written as one (no decimal
    point, no exponent) or, written as a float ("21.0": a count stored as a float), some number is
    at least 2 — so a metric column whose values happen to be 0.0 and 1.0 keeps its decimals.
    """
    if not all(f.is_integer() for f in nums):
        return False
    written = all("." not in v and "e" not in v.lower() for v in values if _num(v) is not None)
    return written or max(abs(f) for f in nums) >= 2


def _magnitude_kind(low: str, top: float) -> str:
    """The kind of a column of non-integer numbers by their largest magnitude ``top`` and its lower-cased name."""
    if top >= 1000:
        return "big"
    if 0 < top < 0.01:
        return "small"
    if any(w in low for w in ("diff", "_vs_", "difference", "change", "ci_")):
        return "diff"
    return "metric"


def _is_p(name: str) -> bool:
    """Whether a column holds p-values: ``p_value``, ``p_holm`` or ``<stem>_p`` / ``<stem>_p_holm``."""
    return name in ("p_value", "p_holm") or name.endswith(("_p", "_p_holm"))


def _fmt(v: str, kind: str) -> str:
    """One cell: NaN as an en dash, text escaped, numbers as their column's ``kind`` says
    (p-values to three decimals, ``<0.001`` below that).
    """
    f = _num(v)
    if f is None:
        return html.escape(v)
    if math.isnan(f):
        return "–"
    if kind == "p":
        return "&lt;0.001" if f < 0.001 else f"{f:.3f}"
    if math.isinf(f):
        return "∞" if f > 0 else "−∞"
    if kind == "int" or (kind == "big" and abs(f) >= 1000):
        return f"{f:,.0f}".replace("-", "−")
    if kind == "one":
        return f"{f:.1f}".replace("-", "−")
    out = f"{f:.3g}" if kind == "small" else f"{f:.3f}"
    if kind == "diff" and f > 0:
        out = "+" + out
    return out.replace("-", "−")


def _groups(cols: list[str]) -> list[tuple[str, list[str], str]]:
    """Display columns ``(header, source columns, joiner)``: mean ± std, mean (CI low, high), won/lost."""
    out: list[tuple[str, list[str], str]] = []
    used: set[str] = set()
    for c in cols:
        if c not in used:
            group = _group(c, cols)
            used.update(group[1][1:])
            out.append(group)
    return out


def _group(c: str, cols: list[str]) -> tuple[str, list[str], str]:
    """The display column that column ``c`` heads (with the columns it joins)."""
    stem = "" if c == "diff_mean" else (c[:-5] if c.endswith("_mean") else None)
    mean = _mean_group(c, stem, cols) if stem is not None else None
    if mean is not None:
        return mean
    if c.endswith("wins") and (c[:-4] + "losses") in cols:
        return f"{c[:-4]}won/lost".replace("_", " "), [c, c[:-4] + "losses"], "/"
    if c == "reference_wins" and "other_wins" in cols:
        return "ref. won/lost", [c, "other_wins"], "/"
    if _is_p(c) and not c.endswith("p_holm") and _holm_of(c) in cols:
        keys = [c, _holm_of(c)] + (["n_comparisons"] if "n_comparisons" in cols else [])
        return f"{c[:-2] + ' ' if c.endswith('_p') else ''}p (Holm)".replace("_", " "), keys, "p"
    return c.replace("_", " "), [c], ""


def _mean_group(c: str, stem: str, cols: list[str]) -> tuple[str, list[str], str] | None:
    """A mean with its interval (mean (CI low, high)) or its spread (mean ± std); ``None`` when ``cols`` has neither."""
    lo, hi = (f"{stem}_ci_low", f"{stem}_ci_high") if stem else ("ci_low", "ci_high")
    if lo in cols and hi in cols:
        return f"{stem or 'difference'} (95 % CI)".replace("_", " "), [c, lo, hi], "ci"
    if stem and f"{stem}_std" in cols:
        return f"{stem} (mean ± std)".replace("_", " "), [c, f"{stem}_std"], " ± "
    return None


def _below(v: str, alpha: float) -> bool:
    """Whether a cell holds a number below ``alpha`` (NaN and text do not)."""
    f = _num(v)
    return f is not None and f < alpha


def _holm_of(p_column: str) -> str:
    """The Holm-adjusted column beside a raw p-value column."""
    return "p_holm" if p_column == "p_value" else p_column + "_holm"


def _p_cell(parts: list[str]) -> str:
    """Raw p above its Holm-adjusted value (and the family's size when known)."""
    of = f" of {parts[2]}" if len(parts) > 2 else ""
    return f"{parts[0]}<br><span class=ci>Holm {parts[1]}{of}</span>"


def _cell(r: dict[str, str], keys: list[str], joiner: str, kinds: dict[str, str]) -> str:
    """One cell of the display column joining ``keys`` of row ``r``."""
    parts = [_fmt(r[k], kinds[k]) for k in keys]
    if joiner == "ci" and parts[0] not in ("–", "") and any(p in ("–", "") for p in parts[1:]):
        # NaN (or empty) interval beside a mean: fewer than two seeds, no t-interval
        parts[1:] = ["1 seed, no CI"]
    text = (f"{parts[0]}<br><span class=ci>({', '.join(parts[1:])})</span>" if joiner == "ci"
            else _p_cell(parts) if joiner == "p"
            else joiner.join(parts))
    cls = " class=t" if len(keys) == 1 and kinds[keys[0]] == "text" else ""
    return f"<td{cls}>{text}</td>"


def _row(r: dict[str, str], groups: list[tuple[str, list[str], str]], kinds: dict[str, str],
         holm_cols: list[str]) -> str:
    """One table row, in bold when a Holm-adjusted p-value is below :data:`ALPHA`."""
    cells = "".join(_cell(r, keys, joiner, kinds) for _, keys, joiner in groups)
    return ("<tr class=sig>" if any(_below(r[c], ALPHA) for c in holm_cols) else "<tr>") + cells + "</tr>"


def _table(path: Path, title: str, max_rows: int = 60, show: list[str] | None = None, budget: str = "") -> str:
    rows = read_csv(path)
    if not rows:
        return f"<p class=meta>{html.escape(title)}: no rows.</p>"
    cols = [c for c in rows[0] if show is None or c in show]
    kinds = {c: _kind(c, [r[c] for r in rows]) for c in cols}
    groups = _groups(cols)
    head = "".join(f"<th>{html.escape(name)}</th>" for name, _, _ in groups)
    holm_cols = [c for c in cols if c.endswith("p_holm")]
    body = [_row(r, groups, kinds, holm_cols) for r in rows[:max_rows]]
    more = f"<p class=meta>{len(rows) - max_rows} more rows in {path.name}</p>" if len(rows) > max_rows else ""
    if show is not None and len(cols) < len(rows[0]):
        more += f"<p class=meta>{path.name} has {len(rows[0]) - len(cols)} more columns.</p>"
    note = (" <span class=meta>p: two-sided paired t-test over seeds; Holm: adjusted by Holm's method over the "
            f"comparisons of one family (its size after “of”); rows in bold: Holm-adjusted p &lt; {ALPHA:g}.</span>"
            if holm_cols else "")
    return (f"<div class=tw><table><caption>{html.escape(title)} <span class=meta>({path.name})</span>{note}"
            f"{_budget_tag(budget)}</caption>"
            f"<tr>{head}</tr>{''.join(body)}</table></div>{more}")


def _budget_tag(budget: str) -> str:
    """The short budget label a table or figure caption ends with (nothing at the paper's budget)."""
    return f" <span class=budget>[{html.escape(budget.split(':')[0])}]</span>" if budget else ""


def _budget_of(man: dict[str, Any], cfg: dict[str, Any]) -> str:
    """The experiment's budget label: its manifest's (:func:`topofl.experiments.base.budget_label`),
    or, for a manifest written before labels, the profile named in ``config.json`` when it is not ``full``.
    """
    from topofl.experiments.base import CUSTOM_SETTINGS, override_diffs

    label = str(man.get("budget") or "")
    profile = str(cfg.get("profile", "full"))
    if "budget" not in man and profile != "full":   # a manifest with a label says "" where the budget is the paper's
        label = f"{profile} budget — below the paper's, not comparable with its numbers"
    overrides = cfg.get("overrides")
    if not isinstance(overrides, dict) or not overrides:
        return label
    from topofl.experiments.driver import experiment

    try:
        full = experiment(str(cfg.get("experiment") or man.get("name", ""))).budgets.get("full")
    except ValueError:
        full = None
    diffs = [p for p in (label.split(": ", 1)[1] if ": " in label else "").split("; ") if p and p != CUSTOM_SETTINGS]
    return "custom budget — differs from the paper's: " + "; ".join([*diffs, *override_diffs(full, overrides)])


def _figure(exp_dir: Path, fig: dict, budget: str = "") -> str:
    data = base64.b64encode((exp_dir / fig["png"]).read_bytes()).decode()
    svg = f' · <a href="{exp_dir.name}/{fig["svg"]}">SVG</a>' if "svg" in fig else ""
    return (
        f'<figure><img alt="{html.escape(fig["caption"])}" src="data:image/png;base64,{data}">'
        f'<figcaption>{html.escape(fig["caption"])}{_budget_tag(budget)}{svg}</figcaption></figure>'
    )


def _kv(d: Any) -> str:
    """``k=v, ...`` of a settings dict, less NaN values (a setting a run does not have, e.g. a baseline's γ)."""
    if not isinstance(d, dict):
        return "–"
    items = [(k, v) for k, v in d.items() if not (isinstance(v, float) and math.isnan(v))]
    return ", ".join(f"{k}={v}" for k, v in items) if items else "–"


def _settings(cfg: dict[str, Any]) -> str:
    """An experiment's settings: budget, seeds, and each distinct run (less its seed) with the
    hyper-parameters it sets (the others are the defaults listed at the end of the report).
    """
    runs = cfg.get("runs", [])
    if not runs:
        return ""
    rows = []
    for r in runs:
        label = r.get("label") or r.get("method", "")
        method = r.get("method", "") if r.get("label") else ""
        cells = [label, method, r.get("scenario", ""), str(r.get("rounds", "")), r.get("model", ""),
                 _kv(r.get("hyperparameters")),
                 _kv({**r.get("scenario_params", {}), **r.get("setting", {}), **r.get("graph", {})})]
        rows.append("<tr>" + "".join(f"<td class=t>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    seeds = cfg.get("seeds", [])
    head = "".join(f"<th>{h}</th>"
                   for h in ("run", "method", "data", "rounds", "model", "hyper-parameters set", "data / setting"))
    return (f"<details><summary>Settings: {len(runs)} distinct runs × {len(seeds)} seeds ({cfg.get('n_runs', 0)} "
            f"runs), budget {_budget_name(cfg)}, "
            f"{cfg.get('seconds', 0):.1f} s</summary>"
            f"<div class=tw><table><tr>{head}</tr>{''.join(rows)}</table></div></details>")


def _budget_name(cfg: dict[str, Any]) -> str:
    """An experiment's budget for its settings: the profile, or ``custom (full with rounds=2)`` when the
    command line changed its plan (``config.json``'s ``overrides``).
    """
    profile = str(cfg.get("profile", "full"))
    overrides = cfg.get("overrides")
    if not isinstance(overrides, dict) or not overrides:
        return html.escape(profile)
    return html.escape(f"custom ({profile} with " + ", ".join(f"{k}={v}" for k, v in overrides.items()) + ")")


def _defaults(methods: set[str]) -> str:
    """The default hyper-parameters of every method the experiments ran."""
    from topofl.methods import available, get

    rows = []
    for name in [m for m in available() if m in methods]:
        config = get(name).config
        values = ", ".join(f"{f.name}={f.default}" for f in dataclasses.fields(config)
                           if f.default is not dataclasses.MISSING)
        rows.append(f"<tr><td>{html.escape(name)}</td><td class=t><code>{html.escape(values)}</code></td></tr>")
    if not rows:
        return ""
    return ("<details><summary>Default hyper-parameters of every method used (runs above list what they change)"
            "</summary>"
            f"<div class=tw><table><tr><th>method</th><th>defaults</th></tr>{''.join(rows)}</table></div></details>")


def _report_dirs(out: Path) -> list[Path]:
    """The experiment directories of ``out`` in report order (each followed by its tuned version),
    ``out`` itself first when it holds one result; ``ValueError`` when there is none.
    """
    if not out.is_dir():
        raise ValueError(f"report directory {str(out)!r} does not exist")
    dirs = [out / n for base in ORDER for n in (base, f"{base}-tuned") if (out / n / "manifest.json").exists()]
    dirs += [d for d in sorted(out.iterdir()) if (d / "manifest.json").exists() and d not in dirs]
    if (out / "manifest.json").exists():  # a directory of one result (topofl tune) is its own section
        dirs.insert(0, out)
    if not dirs:
        raise ValueError(f"{str(out)!r} holds no experiment results (no */manifest.json); run `topofl experiment NAME "
                         f"--out {out}` first")
    return dirs


def _section(d: Path, man: dict[str, Any], cfg: dict[str, Any]) -> str:
    """One experiment's section: title, description, notes, tables, figures and settings."""
    budget = _budget_of(man, cfg)
    parts = [f'<h2 id="{man["name"]}">{html.escape(man["title"])}</h2><p>{html.escape(man["description"])}</p>']
    if budget:
        parts.append(f"<div class=budgetnote><b>{html.escape(budget.split(':')[0])}</b>"
                     f"{html.escape(budget[len(budget.split(':')[0]):])}. Every table and figure below "
                     "is at this budget.</div>")
    parts += [f'<div class=note>{html.escape(n)}</div>' for n in man["notes"]]
    parts += [_table(d / t["csv"], t["title"], show=t.get("show"), budget=budget) for t in man["tables"]
              if t["csv"] != "pairs.csv"]
    parts += [_figure(d, f, budget) for f in man["figures"]]
    parts.append(_settings(cfg))
    return "\n".join(parts)


def build_report(out: Path) -> Path:
    """Write ``out/report.html`` from every ``out/<experiment>/manifest.json`` (each experiment
    followed by its tuned version, ``<experiment>-tuned``) and ``out/manifest.json`` itself when
    there is one (``topofl tune``); return its path.
    """
    out = Path(out)
    dirs = _report_dirs(out)
    sections: list[str] = []
    nav: list[str] = []
    versions: dict[str, str] = {}
    configs: list[str] = []
    methods: set[str] = set()
    for d in dirs:
        man = json.loads((d / "manifest.json").read_text())
        cfg = json.loads((d / "config.json").read_text()) if (d / "config.json").exists() else {}
        versions = cfg.get("versions", versions)
        methods.update(r.get("method", "") for r in cfg.get("runs", []))
        configs.append(
            f"<tr><td>{html.escape(man['name'])}</td><td>{len(cfg.get('seeds', []))}</td>"
            f"<td>{cfg.get('n_runs', 0):,}</td>"
            f"<td>{html.escape(str(cfg.get('profile', 'full')))}</td><td>{cfg.get('seconds', 0):.1f}</td></tr>"
        )
        nav.append(f'<a href="#{man["name"]}">{html.escape(man["title"])}</a>')
        sections.append(_section(d, man, cfg))
    commit = versions.get("git commit", "not recorded")
    vers = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in versions.items())
    page = f"""<!doctype html><html lang=en><head><meta charset=utf-8>\
<meta name=viewport content="width=device-width, initial-scale=1">
<title>topofl report</title><style>{CSS}</style></head><body>
<h1>topofl — experiment report</h1>
<p class=meta>Generated {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} from \
{html.escape(str(out))}; topofl {html.escape(versions.get('topofl', '?'))}, git commit \
<code>{html.escape(commit)}</code>. Every number and figure is drawn from the tidy result files beside this report. \
Intervals are 95 % Student-t intervals over seeds; paired differences compare methods on the same seed (same data and \
split).</p>
<nav>{' '.join(nav)}</nav>
{''.join(sections)}
<h2 id=config>Configuration</h2>
<div class=tw><table><caption>Experiments</caption>\
<tr><th>experiment</th><th>seeds</th><th>runs</th><th>budget</th><th>seconds</th></tr>\
{''.join(configs)}</table></div>
{_defaults(methods)}
<div class=tw><table><caption>Versions</caption><tr><th>package</th><th>version</th></tr>{vers}</table></div>
</body></html>"""
    path = out / "report.html"
    path.write_text(page)
    return path
