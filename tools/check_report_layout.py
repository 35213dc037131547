"""Render a topofl report in headless Chromium at given window widths and list what overflows.

    python tools/check_report_layout.py results/report.html [--widths 1400,760] [--screenshots DIR]

For each width, every table's box (and its scroll container's content) must fit the page's
width, and every figure must fit its column. Prints one line per problem and exits 1 if there is
any; 0 when the report fits. Needs Chromium (Debian: ``apt-get install chromium``).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = """<script>
window.addEventListener('load', () => {
  const width = document.documentElement.clientWidth, problems = [];
  document.querySelectorAll('table').forEach((t, i) => {
    const r = t.getBoundingClientRect(), box = t.parentElement;
    const name = (t.querySelector('caption') || {}).textContent || ('table ' + i);
    if (r.right > width + 1) problems.push(`table "${name.trim().slice(0, 80)}" ends at ${Math.round(r.right)} px > ${width} px`);
    if (box.classList.contains('tw') && box.scrollWidth > box.clientWidth + 1 && !t.closest('details:not([open])'))
      problems.push(`table "${name.trim().slice(0, 80)}" needs ${box.scrollWidth} px, has ${box.clientWidth} px (scrolls)`);
  });
  document.querySelectorAll('figure img').forEach((im, i) => {
    const r = im.getBoundingClientRect();
    if (r.right > width + 1) problems.push(`figure ${i} ends at ${Math.round(r.right)} px > ${width} px`);
  });
  const pre = document.createElement('pre'); pre.id = 'layout-check';
  pre.textContent = JSON.stringify({width, scrollWidth: document.documentElement.scrollWidth, problems});
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str | None:
    """Path of a Chromium or Chrome binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def check(report: Path, width: int, height: int = 1000, screenshot: Path | None = None) -> dict:
    """``{"width", "scrollWidth", "problems"}`` of ``report`` rendered ``width`` pixels wide."""
    exe = chromium()
    if exe is None:
        raise RuntimeError("no Chromium found (Debian: apt-get install chromium)")
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--window-size={width},{height}"]
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
        flags.append(f"--user-data-dir={tmp}/profile")
        res = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
        if screenshot is not None:
            subprocess.run([*flags, f"--screenshot={screenshot}", report.resolve().as_uri()], capture_output=True, timeout=120)
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', res.stdout, re.S)
    if not found:
        raise RuntimeError(f"Chromium gave no layout result (exit {res.returncode}): {res.stderr[-500:]}")
    import html

    return json.loads(html.unescape(found.group(1)))


def main(argv: list[str] | None = None) -> int:
    """Check each width; print the problems; 1 if there is any, else 0."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("--widths", default="1400,760")
    ap.add_argument("--screenshots", type=Path, default=None, help="write report-<width>.png (top of the page) here")
    args = ap.parse_args(argv)
    bad = 0
    for w in (int(x) for x in args.widths.split(",")):
        shot = args.screenshots / f"report-{w}.png" if args.screenshots else None
        r = check(args.report, w, screenshot=shot)
        print(f"{w} px: page {r['scrollWidth']} px wide, {len(r['problems'])} problem(s)")
        for p in r["problems"]:
            print(f"  {p}")
        bad += len(r["problems"]) + (r["scrollWidth"] > r["width"] + 1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
