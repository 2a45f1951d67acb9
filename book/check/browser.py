"""The built book, read in headless Chromium page by page, held to what a reader needs.

``python -m book.check [book/_build/html] [--screens book/_build/screens]`` serves the built
HTML on localhost (``http.server`` in a thread), opens every page in Debian's ``chromium``
through ``chromedriver`` and selenium (nothing is downloaded at run time), waits for MathJax 3
to finish (``MathJax.startup.promise``) and asserts, per page:

1. **math** — MathJax finished and reported no error (no ``mjx-merror``); no TeX source it
   typesets puts a delimiter inside a subscript (:func:`book.check.rules.tex_problems`); the
   visible text outside math and code holds no raw TeX, ASCII math or unrendered Markdown
   (:data:`book.check.rules.RAW_MATH`);
2. **fit** — the page does not scroll sideways; no element reaches past the content column
   unless it sits in an intentional horizontal scroller (a code block, or an element of class
   :data:`SCROLLER_CLASS` that a page adds on purpose); no display equation is wider than its
   box (clipped or scrolled); no short table cell (≤ 24 characters) is squeezed onto three or
   more lines;
3. **figures** — every image has a caption that is a sentence
   (:func:`book.check.rules.caption_problems`), and its smallest text, recorded in the PNG at
   save time (:mod:`book.check.figtext`), is at least :data:`~book.check.figtext.MIN_TEXT_PX`
   CSS pixels at the width the page shows it;
4. **audience** — no text names issues, internal table ids, dates of writing, sessions or how
   the project was built (:data:`book.check.rules.BUILDER_TEXT`).

It saves the first screen of every page as ``<screens>/<page>.png`` (``theory/t2.html`` →
``theory__t2.png``) for a human to look at, prints one line per finding and exits 1 when there
is any (2 when it cannot run: no browser, no built book).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import http.server
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from book.check import figtext, rules

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WIDTH, HEIGHT = 1280, 900  # the reader's window: a laptop screen
SCROLLER_CLASS = "asyncpp-scroll"
# Sphinx's generated pages (index, search) are not the book's text.
SKIP_PAGES = {"genindex.html", "search.html", "py-modindex.html"}
MATHJAX_TIMEOUT_S = 30
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}")


class CannotRun(RuntimeError):
    """The check cannot run here (no browser or driver, no built book)."""


@dataclass
class Finding:
    page: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.page}: {self.rule}: {' '.join(self.detail.split())}"


@dataclass
class Report:
    pages: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    screens: dict[str, Path] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.findings


# -- the page probe (runs in the browser) -------------------------------------------------------
WAIT_MATHJAX = """
const done = arguments[arguments.length - 1];
const t0 = Date.now();
const wants = [...document.scripts].some(s => /mathjax/i.test(s.src || ''));
function go() {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    MathJax.startup.promise.then(() => done('ok')).catch(e => done('error: ' + e));
  } else if (!wants && document.readyState === 'complete') {
    done('none');
  } else if (Date.now() - t0 > arguments[0] * 1000) {
    done('timeout');
  } else { setTimeout(go, 50); }
}
go();
"""

PROBE = r"""
const SCROLLER = arguments[0];
const col = document.querySelector('article.bd-article') || document.querySelector('[role=main]')
            || document.querySelector('main') || document.body;
const cs = getComputedStyle(col), cr = col.getBoundingClientRect();
const left = cr.left + parseFloat(cs.paddingLeft), right = cr.right - parseFloat(cs.paddingRight);
const out = {column: Math.round(right - left), pageScroll: document.documentElement.scrollWidth
             - document.documentElement.clientWidth, blocks: [], overflow: [], equations: [],
             squeezed: [], images: [], merrors: [], tex: []};
const SKIP = 'mjx-container, script, style, code, pre, kbd, samp, tt, .highlight, .sig, '
           + '.headerlink, .MathJax, math, svg';
const BLOCK = 'p, li, td, th, dt, dd, figcaption, caption, h1, h2, h3, h4, h5, h6, blockquote, '
            + 'div, section, article, aside, details, summary';
function label(el) {
  let s = el.tagName.toLowerCase();
  if (el.id) s += '#' + el.id;
  const sec = el.closest('section[id]');
  if (sec && sec !== el) s += ' in §' + sec.id;
  return s;
}
// 1. visible text per block, math and code replaced by a placeholder
const texts = new Map();
const walker = document.createTreeWalker(col, NodeFilter.SHOW_TEXT | NodeFilter.SHOW_ELEMENT, {
  acceptNode(n) {
    if (n.nodeType === 1) return n.matches(SKIP) ? NodeFilter.FILTER_REJECT
                                                : NodeFilter.FILTER_SKIP;
    return NodeFilter.FILTER_ACCEPT;
  }});
const PH = '\u27e8\u00b7\u27e9';
let node;
const marks = new Set();
for (const el of col.querySelectorAll(SKIP)) {
  const b = el.parentElement && el.parentElement.closest(BLOCK);
  if (b && !el.parentElement.closest(SKIP)) marks.add(el);
}
// text in document order, with placeholders where skipped elements sit
function collect(block) {
  let s = '';
  (function rec(n) {
    for (const c of n.childNodes) {
      if (c.nodeType === 3) s += c.nodeValue;
      else if (c.nodeType === 1) {
        if (c.matches(SKIP)) { s += ' ' + PH + ' '; continue; }
        if (c.matches(BLOCK)) { s += '\n'; continue; }  // its own block
        rec(c);
      }
    }
  })(block);
  return s;
}
for (const b of [col, ...col.querySelectorAll(BLOCK)]) {
  if (b.closest(SKIP)) continue;
  const t = collect(b).split('\n').map(x => x.replace(/\s+/g, ' ').trim()).filter(x => x);
  for (const x of t) out.blocks.push([label(b), x]);
}
// 2. fit: outermost elements past the column
function scroller(el) {
  for (let a = el.parentElement; a && a !== col.parentElement; a = a.parentElement) {
    const ox = getComputedStyle(a).overflowX;
    if (ox === 'auto' || ox === 'scroll' || ox === 'hidden' || ox === 'clip') return a;
  }
  return null;
}
const reported = [];
for (const el of col.querySelectorAll('*')) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) continue;
  if (r.right <= right + 2 && r.left >= left - 2) continue;
  if (reported.some(p => p.contains(el))) continue;
  const sc = scroller(el);
  if (sc) {
    const intentional = sc.matches('pre, .highlight, .' + SCROLLER + ', .' + SCROLLER + ' *')
                        || sc.closest('.' + SCROLLER);
    const sr = sc.getBoundingClientRect();
    if (intentional && sr.right <= right + 2) continue;
    if (el.closest('mjx-container')) continue;  // equations: checked below
    reported.push(sc);
    const what = getComputedStyle(sc).overflowX === 'hidden' || getComputedStyle(sc).overflowX
                 === 'clip' ? 'clipped' : 'in a scroller that is not marked ' + SCROLLER;
    out.overflow.push([label(el), Math.round(r.width), what,
                       (el.innerText || '').slice(0, 60)]);
  } else {
    reported.push(el);
    out.overflow.push([label(el), Math.round(r.width), 'past the column',
                       (el.innerText || '').slice(0, 60)]);
  }
}
for (const m of col.querySelectorAll('mjx-container[display="true"], mjx-container[jax]')) {
  const box = m.closest('.math, div') || m;
  const r = m.getBoundingClientRect();
  const wide = Math.max(m.scrollWidth, ...[...m.children].map(c =>
                        c.getBoundingClientRect().width));
  const display = m.getAttribute('display') === 'true';
  if ((display && (wide > m.clientWidth + 2 || r.right > right + 2))
      || (!display && r.right > right + 2 && !m.closest('td, th, pre'))) {
    out.equations.push([label(box), Math.round(wide), Math.round(m.clientWidth),
                        (m.getAttribute('aria-label') || m.textContent || '').slice(0, 60)]);
  }
}
// 3. squeezed table cells: short text broken over three or more lines
for (const c of col.querySelectorAll('td, th')) {
  const t = (c.innerText || '').trim();
  if (!t || t.length > 24) continue;
  // lines = distinct tops of the cell's text (element boxes such as a wrapping <p> start a
  // few px above their first line and would count as a line of their own)
  const tops = [];
  const walk = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (!n.textContent.trim()) continue;
    const rg = document.createRange(); rg.selectNodeContents(n);
    for (const r of rg.getClientRects()) if (r.width > 0) tops.push(r.top);
  }
  tops.sort((a, b) => a - b);
  let lines = 0, last = -1e9;
  for (const y of tops) { if (y - last > 4) { lines += 1; last = y; } }
  if (lines >= 3) out.squeezed.push([label(c), lines, t]);
}
// 4. images and their captions
for (const img of col.querySelectorAll('img')) {
  const r = img.getBoundingClientRect();
  if (r.width === 0) continue;
  const fig = img.closest('figure');
  const cap = fig ? fig.querySelector('figcaption') : null;
  out.images.push({src: img.currentSrc || img.src, natural: img.naturalWidth,
                   shown: r.width, caption: cap ? cap.innerText : null,
                   alt: img.getAttribute('alt') || ''});
}
for (const e of document.querySelectorAll('mjx-merror, [data-mjx-error]'))
  out.merrors.push(e.getAttribute('data-mjx-error') || e.textContent.slice(0, 80));
if (window.MathJax && MathJax.startup && MathJax.startup.document) {
  for (const item of MathJax.startup.document.math) out.tex.push(item.math);
}
return out;
"""


# -- serving and driving ------------------------------------------------------------------------
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the check prints findings, not requests
        pass


@contextlib.contextmanager
def serve(root: Path):
    """``http://127.0.0.1:<port>/`` serving ``root`` from a thread, for the duration."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def browser():
    """A headless Chromium (Debian's, through its chromedriver) with a fresh profile."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise CannotRun(f"{path} is missing: apt-get install chromium chromium-driver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        raise CannotRun("selenium is not installed: pip install -e '.[book]'") from exc
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download
    profile = tempfile.mkdtemp(prefix="asyncpp-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.set_window_size(WIDTH, HEIGHT)
        driver.set_script_timeout(MATHJAX_TIMEOUT_S + 5)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def pages(root: Path) -> list[str]:
    """Every page of the built book, relative to ``root``, in a stable order."""
    if not (root / "index.html").is_file():
        raise CannotRun(f"no built book at {root} (run `make book`)")
    out = []
    for p in sorted(root.rglob("*.html")):
        rel = p.relative_to(root).as_posix()
        if rel.split("/")[0].startswith("_") or rel in SKIP_PAGES:
            continue
        if rel == "index.html" and "http-equiv=\"Refresh\"" in p.read_text(errors="replace"):
            continue  # jupyter-book's redirect to the root page
        out.append(rel)
    return out


def _image_bytes(src: str, root: Path, base: str) -> bytes | None:
    if src.startswith("data:"):
        head, _, payload = src.partition(",")
        return base64.b64decode(payload) if ";base64" in head else payload.encode()
    if not src.startswith(base):
        return None
    rel = urllib.parse.unquote(urllib.parse.urlparse(src).path).lstrip("/")
    path = root / rel
    return path.read_bytes() if path.is_file() else None


def _figure_findings(img: dict, root: Path, base: str) -> list[tuple[str, str]]:
    if img["src"].startswith("data:"):  # an embedded image: named by its caption
        words = (img["caption"] or img["alt"] or "").split()
        name = "the figure “" + " ".join(words[:6]) + ("…”" if len(words) > 6 else "”") \
            if words else "an embedded image"
    else:
        name = urllib.parse.unquote(img["src"].rsplit("/", 1)[-1])[:60]
    out = [(rule, f"{name}: {d}" if d else name)
           for rule, d in rules.caption_problems(img["caption"])]
    data = _image_bytes(img["src"], root, base)
    if data is None or not data.startswith(b"\x89PNG"):
        return out + [("figure text not measurable", f"{name} is not a PNG of this book")]
    px = figtext.recorded_text_px(data)
    if px is None:
        return out + [("figure text not measurable",
                       f"{name} has no {figtext.KEY} record (saved outside matplotlib?)")]
    natural = img["natural"] or figtext.size(data)[0]
    shown = px * img["shown"] / natural
    if shown < figtext.MIN_TEXT_PX - 0.05:
        out.append(("figure text too small",
                    f"{name}: smallest text {shown:.1f} px at {img['shown']:.0f} px wide "
                    f"(needs ≥ {figtext.MIN_TEXT_PX:g} px: larger fonts or a narrower figure)"))
    return out


def check_page(driver, base: str, root: Path, page: str, screens: Path | None
               ) -> tuple[list[Finding], Path | None]:
    """Open one page, wait for MathJax, run the probe; the findings and the screenshot."""
    driver.get(base + page)
    found: list[Finding] = []
    add = lambda rule, detail: found.append(Finding(page, rule, detail))
    state = driver.execute_async_script(WAIT_MATHJAX, MATHJAX_TIMEOUT_S)
    if state != "ok" and state != "none":
        add("MathJax did not finish", state)
    driver.execute_script("return document.fonts ? document.fonts.ready : null")
    data = driver.execute_script(PROBE, SCROLLER_CLASS)
    for err in data["merrors"]:
        add("MathJax error", err)
    for tex in data["tex"]:
        for rule, detail in rules.tex_problems(tex):
            add(rule, detail)
    for where, text in data["blocks"]:
        for rule, detail in rules.text_problems(text):
            add(rule, f"{where}: “{detail}”")
    if data["pageScroll"] > 2:
        add("page scrolls sideways", f"by {data['pageScroll']} px")
    for where, width, what, text in data["overflow"]:
        add("wider than the column",
            f"{where} is {width} px against {data['column']} px, {what}: “{text.strip()}”")
    for where, wide, box, text in data["equations"]:
        add("display equation clipped", f"{where}: {wide} px in {box} px: “{text.strip()}”")
    for where, lines, text in data["squeezed"]:
        add("table cell squeezed", f"{where}: “{text}” on {lines} lines")
    for img in data["images"]:
        for rule, detail in _figure_findings(img, root, base):
            add(rule, detail)
    shot = None
    if screens is not None:
        driver.execute_script("window.scrollTo(0, 0)")
        shot = screens / (page[:-len(".html")].replace("/", "__") + ".png")
        driver.save_screenshot(str(shot))
    return found, shot


def run(root: Path, screens: Path | None = None, only: list[str] | None = None) -> Report:
    """Check every page under ``root`` (or the pages ``only`` names)."""
    t0 = time.monotonic()
    root = Path(root).resolve()
    report = Report(pages=only or pages(root))
    if screens is not None:
        screens.mkdir(parents=True, exist_ok=True)
    with serve(root) as base, browser() as driver:
        for page in report.pages:
            found, shot = check_page(driver, base, root, page, screens)
            report.findings.extend(found)
            if shot is not None:
                report.screens[page] = shot
    report.seconds = time.monotonic() - t0
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m book.check", description=__doc__.split("\n")[0])
    ap.add_argument("html", nargs="?", default="book/_build/html", type=Path,
                    help="the built book (default: book/_build/html)")
    ap.add_argument("--screens", type=Path, default=None,
                    help="where the first-screen shots go (default: <html>/../screens)")
    ap.add_argument("--page", action="append", default=None,
                    help="check only this page (relative to html; repeatable)")
    args = ap.parse_args(argv)
    screens = args.screens or args.html.parent / "screens"
    try:
        report = run(args.html, screens, args.page)
    except CannotRun as exc:
        print(f"book check: cannot run: {exc}", file=sys.stderr)
        return 2
    for f in report.findings:
        print(f)
    verdict = "passed" if report.ok else f"{len(report.findings)} findings"
    print(f"book check: {len(report.pages)} pages in {report.seconds:.0f} s, {verdict}; "
          f"first screens in {screens}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
