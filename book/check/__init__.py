"""The browser check of the built book (``python -m book.check``): see :mod:`book.check.browser`.

- :mod:`book.check.rules` — what a reader must never see (raw TeX, ASCII math, builder-facing
  text, captions that are file names), as patterns over visible text;
- :mod:`book.check.figtext` — the smallest text of each figure, recorded in its PNG when it is
  saved, so the check can measure it at the width the page shows it;
- :mod:`book.check.browser` — the check itself: headless Chromium over every page.
"""
