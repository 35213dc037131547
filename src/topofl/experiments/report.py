"""A self-contained HTML report of an experiments directory (figures embedded, tables inline)."""
from __future__ import annotations

import base64
import html
import json
import math
from datetime import datetime, timezone
from pathlib import Path

from topofl.experiments.results import read_csv

ORDER = (
    "comparison", "robustness", "continual", "privacy", "ablation", "diagrams",
    "sheaf-digits", "sheaf-centralised", "sheaf-hetero", "sheaf-topology", "sheaf-init",
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1180px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{border-bottom:3px solid #1b9e77;padding-bottom:.3em}h2{margin-top:2.2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.8em 0 1.6em;font-size:.86em}th,td{border:1px solid #ddd;padding:.25em .6em;text-align:right}
th{background:#f3f6f4}td:first-child,th:first-child{text-align:left}caption{caption-side:top;text-align:left;font-weight:600;padding:.3em 0}
figure{margin:1em 0 2em}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.9em;color:#555}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.5em .8em;margin:.6em 0}.meta{color:#666;font-size:.9em}
nav a{margin-right:1em}
"""


def _cell(v: str) -> str:
    try:
        f = float(v)
    except ValueError:
        return html.escape(v)
    if math.isnan(f):
        return "–"
    if "." not in v and "e" not in v.lower():
        return v  # an integer as written
    if f.is_integer() and abs(f) < 1e9:
        return f"{f:.0f}"
    if f != 0 and abs(f) < 0.01:
        return f"{f:.3g}"  # small values keep three significant figures, not "0.000"
    return f"{f:.3f}"


def _columns(cols: list[str]) -> list[tuple[str, list[str]]]:
    """Display columns: a ``x_mean``/``x_std`` pair becomes one "x (mean ± std)" column."""
    out, skip = [], set()
    for c in cols:
        if c in skip:
            continue
        if c.endswith("_mean") and c[:-5] + "_std" in cols:
            out.append((f"{c[:-5]} (mean ± std)", [c, c[:-5] + "_std"]))
            skip.add(c[:-5] + "_std")
        else:
            out.append((c, [c]))
    return out


def _table(path: Path, title: str, max_rows: int = 60) -> str:
    rows = read_csv(path)
    if not rows:
        return f"<p class=meta>{html.escape(title)}: no rows.</p>"
    cols = _columns(list(rows[0]))
    head = "".join(f"<th>{html.escape(name)}</th>" for name, _ in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{' ± '.join(_cell(r[k]) for k in keys)}</td>" for _, keys in cols) + "</tr>"
        for r in rows[:max_rows]
    )
    more = f"<p class=meta>{len(rows) - max_rows} more rows in {path.name}</p>" if len(rows) > max_rows else ""
    return f"<table><caption>{html.escape(title)} <span class=meta>({path.name})</span></caption><tr>{head}</tr>{body}</table>{more}"


def _figure(exp_dir: Path, fig: dict) -> str:
    data = base64.b64encode((exp_dir / fig["png"]).read_bytes()).decode()
    svg = f' · <a href="{exp_dir.name}/{fig["svg"]}">SVG</a>' if "svg" in fig else ""
    return (
        f'<figure><img alt="{html.escape(fig["caption"])}" src="data:image/png;base64,{data}">'
        f'<figcaption>{html.escape(fig["caption"])}{svg}</figcaption></figure>'
    )


def build_report(out: Path) -> Path:
    """Write ``out/report.html`` from every ``out/<experiment>/manifest.json``; return its path."""
    out = Path(out)
    if not out.is_dir():
        raise ValueError(f"report directory {str(out)!r} does not exist")
    dirs = [out / n for n in ORDER if (out / n / "manifest.json").exists()]
    dirs += [d for d in sorted(out.iterdir()) if (d / "manifest.json").exists() and d not in dirs]
    if not dirs:
        raise ValueError(f"{str(out)!r} holds no experiment results (no */manifest.json); run `topofl experiment NAME --out {out}` first")
    sections: list[str] = []
    nav: list[str] = []
    versions: dict[str, str] = {}
    configs: list[str] = []
    for d in dirs:
        man = json.loads((d / "manifest.json").read_text())
        cfg = json.loads((d / "config.json").read_text()) if (d / "config.json").exists() else {}
        versions = cfg.get("versions", versions)
        configs.append(
            f"<tr><td>{html.escape(man['name'])}</td><td>{len(cfg.get('seeds', []))}</td>"
            f"<td>{cfg.get('n_runs', 0)}</td><td>{cfg.get('seconds', 0):.1f}</td></tr>"
        )
        nav.append(f'<a href="#{man["name"]}">{html.escape(man["title"])}</a>')
        parts = [f'<h2 id="{man["name"]}">{html.escape(man["title"])}</h2><p>{html.escape(man["description"])}</p>']
        parts += [f'<div class=note>{html.escape(n)}</div>' for n in man["notes"]]
        parts += [_table(d / t["csv"], t["title"]) for t in man["tables"] if t["csv"] != "pairs.csv"]
        parts += [_figure(d, f) for f in man["figures"]]
        sections.append("\n".join(parts))
    vers = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in versions.items())
    page = f"""<!doctype html><html lang=en><head><meta charset=utf-8><title>topofl report</title><style>{CSS}</style></head><body>
<h1>topofl — experiment report</h1>
<p class=meta>Generated {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} from {html.escape(str(out))}. \
Every number and figure is drawn from the tidy result files beside this report.</p>
<nav>{' '.join(nav)}</nav>
{''.join(sections)}
<h2 id=config>Configuration</h2>
<table><caption>Experiments</caption><tr><th>experiment</th><th>seeds</th><th>runs</th><th>seconds</th></tr>{''.join(configs)}</table>
<table><caption>Package versions</caption><tr><th>package</th><th>version</th></tr>{vers}</table>
</body></html>"""
    path = out / "report.html"
    path.write_text(page)
    return path
