"""A file path against a glob (``*``, ``?``, ``[...]``), at a cost bounded whatever a
publisher sends.

A fact's ``recheck_when`` may name a glob, matched against the path of every later file
change of its project on each consolidation. ``fnmatch`` turns a glob into a pattern
whose cost is the path's length times the glob's: a 100,000-character path against a
50,000-character glob took seconds, per pair. Here a glob of ``*`` and plain characters (the
common kind) is matched piece by piece with ``str.find``, linear in the path; any other
glob goes to ``fnmatch``, within lengths no real path or glob reaches.
"""

from __future__ import annotations

import fnmatch

MAX_PATH_CHARS = 4096
"""Linux's PATH_MAX: a longer "path" names no file, so it matches no glob."""
MAX_GLOB_CHARS = 1024
"""A longer glob matches nothing (with ``?`` or ``[...]``, ``fnmatch`` costs up to
``MAX_PATH_CHARS`` times this, a few milliseconds)."""


def glob_matches(path: str, glob: str) -> bool:
    """``fnmatch.fnmatchcase(path, glob)`` (``*`` crosses ``/``, as there), for a path of
    at most ``MAX_PATH_CHARS`` and a glob of at most ``MAX_GLOB_CHARS``; else ``False``."""
    if len(path) > MAX_PATH_CHARS or len(glob) > MAX_GLOB_CHARS:
        return False
    if "?" in glob or "[" in glob:
        return fnmatch.fnmatchcase(path, glob)
    if "*" not in glob:
        return path == glob
    first, *middle, last = glob.split("*")
    if len(path) < len(first) + len(last) or not (path.startswith(first) and path.endswith(last)):
        return False
    # Each piece at its leftmost place after the one before: if any placement fits, this one does.
    at, end = len(first), len(path) - len(last)
    for piece in middle:
        found = path.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


__all__ = ["MAX_GLOB_CHARS", "MAX_PATH_CHARS", "glob_matches"]
