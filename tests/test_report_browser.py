"""report.html in a real browser: headless Chromium loads the report of a committed run offline, with no
console message and no error, and displays every figure.

The report has no script of its own; the test loads a copy with a probe script added in <head> (and the
page's Content-Security-Policy widened by `script-src 'unsafe-inline'` for that probe only). The probe
records every error event (a resource that failed, a script error), every CSP violation (anything the page
tried to fetch from outside itself) and console.error, and after the load event writes each <img>'s natural
and displayed size and the page's resource entries into a <pre> that `chromium --dump-dom` prints. Chromium's
own log (--enable-logging=stderr) must hold no console line. A negative control (an <img> pointing at the
network) proves the probe catches what it is there to catch.

Skipped where no Chromium is installed (a developer machine); .ci/run installs Debian's chromium package and
sets IPCBENCH_REQUIRE_BROWSER=1, which turns the skip into a failure.
The browser never reaches the network: no first-run, background networking, component updates, sync or QUIC,
a resolver that resolves nothing, a fresh profile.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth  # noqa: E402
from ipcbench.report.render import CSP  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("IPCBENCH_RESULTS_DIR", REPO / "results"))
BROWSER = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
                if shutil.which(n)), None)
REQUIRED = os.environ.get("IPCBENCH_REQUIRE_BROWSER") == "1"  # .ci/run sets it: CI must not skip this test
pytestmark = pytest.mark.skipif(BROWSER is None and not REQUIRED,
                                reason="no chromium here (CI installs Debian's chromium)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--disable-default-apps", "--no-default-browser-check", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000"]

PROBE = """<script>
window.__probe = [];
addEventListener('error', e => __probe.push('error: ' + (e.message || (e.target && e.target.src
  ? String(e.target.src).slice(0, 80) : e.type))), true);
addEventListener('securitypolicyviolation', e => __probe.push('csp: ' + e.blockedURI + ' ' + e.violatedDirective));
const __err = console.error;
console.error = (...a) => { __probe.push('console.error: ' + a.join(' ')); __err.apply(console, a); };
addEventListener('load', () => {
  const imgs = [...document.images].map(i => ({alt: i.alt, natural: i.naturalWidth, shown:
    Math.round(i.getBoundingClientRect().width), complete: i.complete}));
  const res = performance.getEntriesByType('resource').map(r => r.name.slice(0, 80));
  const p = document.createElement('pre');
  p.id = 'ipcbench-probe';
  p.textContent = JSON.stringify({errors: __probe, images: imgs, resources: res,
    glance: !!document.querySelector('.glance'), title: document.title});
  document.body.appendChild(p);
});
</script>"""


def newest_real_run() -> Path | None:
    from conftest import has_cross_gpu_pairs, real_runs

    runs = [r for r in real_runs() if has_cross_gpu_pairs(r)]  # the figures are of cross-GPU pairs
    return runs[-1] if runs else None


def make_report(run_dir: Path, out: Path) -> Path:
    import argparse
    import contextlib
    import io

    from ipcbench.report import command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = command.run(parser.parse_args([str(run_dir), "--out", str(out), "--quiet"]))
    assert rc == 0
    return out / "report.html"


def with_probe(page: Path, dest: Path, extra_body: str = "") -> Path:
    """A copy of the page with the probe script in <head> (its CSP allows that inline script, nothing more)."""
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text.lower() and CSP in text
    text = text.replace(CSP, CSP + "; script-src 'unsafe-inline'", 1)
    text = text.replace("</head>", PROBE + "</head>", 1)
    if extra_body:
        text = text.replace("</body>", extra_body + "</body>", 1)
    dest.write_text(text, encoding="utf-8")
    return dest


def load(page: Path, tmp: Path) -> tuple[dict, list[str]]:
    """Open the page in headless Chromium; (what the probe recorded, Chromium's console log lines)."""
    assert BROWSER, "IPCBENCH_REQUIRE_BROWSER=1 but no chromium on PATH (.ci/run installs it as root)"
    res = subprocess.run([BROWSER, *FLAGS, f"--user-data-dir={tmp / 'profile'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="ipcbench-probe">(.*?)</pre>', res.stdout, flags=re.S)
    assert m, f"the probe never ran (load event not reached?): rc {res.returncode}, stderr {res.stderr[-2000:]}"
    console = [ln for ln in res.stderr.splitlines() if ":CONSOLE" in ln]
    return json.loads(html.unescape(m.group(1))), console


@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    run = newest_real_run()
    if run is None:  # no committed run (a fresh clone before the team adds one): a synthetic 4-GPU run
        run = synth.make_run(tmp / "results")
    work = tmp / "run" / run.name
    shutil.copytree(run, work, ignore=shutil.ignore_patterns("report"))
    page = make_report(work, tmp / "report")
    md = (tmp / "report" / "report.md").read_text(encoding="utf-8")
    return dict(tmp=tmp, page=page, figures=re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md), run=run)


def test_report_loads_offline_and_shows_every_figure(report_page):
    tmp = report_page["tmp"]
    got, console = load(with_probe(report_page["page"], tmp / "probe.html"), tmp)
    assert got["errors"] == [], got["errors"]
    assert console == [], console
    assert got["resources"] == [], got["resources"]  # nothing fetched: every figure is a data: URI
    assert got["glance"] and got["title"] == "ipcbench report"
    figures = report_page["figures"]
    assert len(figures) >= 5, figures
    assert len(got["images"]) == len(figures)
    for img in got["images"]:
        assert img["complete"] and img["natural"] > 100 and img["shown"] > 100, img


def test_probe_catches_a_network_reference(report_page):
    """Negative control: an image from the network is blocked by the page's policy and seen by the probe."""
    tmp = report_page["tmp"]
    page = with_probe(report_page["page"], tmp / "bad.html",
                      extra_body='<img alt="remote" src="https://example.invalid/x.png">')
    got, console = load(page, tmp)
    assert any(e.startswith("csp: https://example.invalid") for e in got["errors"]), got["errors"]
    assert console, "Chromium logged nothing for a blocked image"
    remote = [i for i in got["images"] if i["alt"] == "remote"]
    assert remote and remote[0]["natural"] == 0
