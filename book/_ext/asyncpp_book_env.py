"""Sphinx extension: make the repository importable by the notebooks the book executes.

The notebook kernels are started by myst-nb as child processes of the Sphinx build and inherit
its environment, so putting the repository root (``theory/``, ``verify/``, ``experiments/``) and
``book/`` (the ``asyncpp_book`` helpers) on ``PYTHONPATH`` here makes ``import theory`` and
``import asyncpp_book`` work in every executed page, whatever directory the page lives in.
``ASYNCPP_REPO_ROOT`` tells the helpers where the data files (verify report, experiment
results) live. Its kernels record the text size of every figure they save (``IPYTHONDIR``,
see :func:`_kernel_startup`). It also serves the bundled MathJax (``book/_vendor/mathjax``)
for offline math, and re-executes every notebook page on every build (see :func:`_executed_pages`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BOOK = Path(__file__).resolve().parent.parent
ROOT = BOOK.parent


def _add_vendor_static(app, config) -> None:
    """Serve ``book/_vendor`` (the bundled MathJax) as static files.

    Added here and not in ``_config.yml``: jupyter-book links every ``.js`` file it finds under
    the configured static paths into every page, which would load all of MathJax's extensions
    eagerly (and MathJax itself twice). Paths added after jupyter-book has built the Sphinx
    configuration are copied, not linked; ``mathjax_path`` then loads the one entry point.
    """
    vendor = str(BOOK / "_vendor")
    if vendor not in config.html_static_path:
        config.html_static_path.append(vendor)


def _executed_pages(app, env, added, changed, removed) -> list[str]:
    """Re-read (hence re-execute) every notebook page on every build, not only changed ones.

    Their outputs depend on files Sphinx does not track — the package, ``theory/``, the verify
    report, ``experiments/<tier>/results/`` — so an incremental build would otherwise keep stale
    numbers. Plain Markdown pages keep Sphinx's incremental behaviour.
    """
    pages = []
    for doc in env.found_docs:
        try:
            head = Path(env.doc2path(doc)).read_text(encoding="utf-8")[:4000]
        except OSError:
            continue
        if head.startswith("---") and "kernelspec:" in head.split("\n---", 1)[0]:
            pages.append(doc)
    return pages


STARTUP = """\
# Written by book/_ext/asyncpp_book_env.py: every PNG a page's figure is saved to records its
# smallest text (book/check/figtext.py), so the browser check can measure it on the page.
try:
    from book.check import figtext as _asyncpp_figtext
    _asyncpp_figtext.install()
    del _asyncpp_figtext
except ImportError:  # matplotlib is not installed: no page draws a figure
    pass
"""


def _kernel_startup(build_dir: Path) -> Path:
    """An IPython profile under the build folder whose start-up file installs
    :func:`book.check.figtext.install` in every kernel the build starts (the kernels find it
    through ``$IPYTHONDIR``); the source tree is left untouched."""
    ipython = build_dir / ".ipython"
    startup = ipython / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-asyncpp-figtext.py").write_text(STARTUP, encoding="utf-8")
    return ipython


def setup(app):
    paths = [str(ROOT), str(BOOK)]
    old = os.environ.get("PYTHONPATH")
    if old:
        paths.append(old)
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.environ.setdefault("ASYNCPP_REPO_ROOT", str(ROOT))
    os.environ["IPYTHONDIR"] = str(_kernel_startup(Path(app.outdir).parent))
    # The pages run tiny models: one intra-op thread per kernel is faster than several
    # fighting over the cores (2-3x on a loaded 2-core machine). Override by setting it.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # autodoc imports the package and theory/ in this process: prefer the checkout's sources.
    for path in (str(ROOT), str(ROOT / "src")):
        if path not in sys.path:
            sys.path.insert(0, path)
    app.connect("config-inited", _add_vendor_static)
    app.connect("env-get-outdated", _executed_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
