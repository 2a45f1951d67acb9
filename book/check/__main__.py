"""``python -m book.check [html]``: the browser check of the built book."""

import sys

from book.check.browser import main

sys.exit(main())
