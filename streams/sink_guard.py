"""Which sink failures a retry can fix, and writing a batch so that one record a store
refuses is dead-lettered instead of stopping the pipeline.

A store that is down (connection lost, read-only, disk full, lock held) fails every record
the same way: that is ``StoreUnavailable``, retried with back-off and reported as
``degraded``. A store that refuses one record's content (a value it cannot convert or
parse) fails only that record, every time: retrying cannot help, so the record goes to the
dead-letter path with ``sink_refused:<store>: <error>`` and the others are written.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

log = logging.getLogger("agentlog.sinks")

T = TypeVar("T")

# ClickHouse error codes that name the data, not the server: parsing, conversion, range.
_REFUSED_CODES = frozenset({
    6, 26, 27, 32, 33, 38, 41, 53, 69, 70, 72, 117, 130, 131, 190, 321, 386, 407, 691,
})  # fmt: skip
_CODE = re.compile(r"Code:\s*(\d+)")
# OpenSearch's per-document bulk errors that name the document, not the cluster.
_REFUSED_DOCUMENT = re.compile(r"mapper_parsing_exception|document_parsing_exception|illegal_argument_exception")
# tantivy raises ValueError for its storage failing too (a file it cannot open or write, a
# writer killed by one, its lock): those name the disk, not the record. Only tantivy's own
# error names: a plain phrase ("No such file or directory") may be a refused record's text
# quoted in its error, and taking it for an outage would retry that record forever.
_STORAGE_FAILED = re.compile(
    r"IoError \{|io::Error|An IO error occurred|OpenWriteError|OpenReadError|OpenDirectoryError|LockFailure"
    r"|index writer was killed")


class StoreUnavailable(RuntimeError):
    """A store failed in a way that retrying may fix; ``store`` names it."""

    def __init__(self, store: str, error: BaseException) -> None:
        super().__init__(f"{store}: {type(error).__name__}: {str(error).strip()[:500]}")
        self.store = store
        self.error = error


def is_refusal(error: BaseException) -> bool:
    """Whether ``error`` is a store refusing this content (as opposed to being down)."""
    if isinstance(error, StoreUnavailable):
        return False
    if _REFUSED_DOCUMENT.search(str(error)):
        return True
    match = _CODE.search(str(error))
    if match is not None:  # a ClickHouse answer: its code says which
        return int(match.group(1)) in _REFUSED_CODES
    if _STORAGE_FAILED.search(str(error)):
        return False
    # Conversions in the drivers and tantivy's document checks raise these (and
    # clickhouse-connect's DataError); I/O and connection failures raise OSError and the
    # drivers' other errors.
    return isinstance(error, (ValueError, TypeError, OverflowError)) or type(error).__name__ == "DataError"


def refusal_reason(store: str, error: BaseException) -> str:
    first_line = (str(error).strip().splitlines() or [""])[0][:300]
    return f"sink_refused:{store}: {type(error).__name__}: {first_line}"


def write_isolating(
    store: str, write: Callable[[Sequence[T]], None], items: Sequence[T], raw_of: Callable[[T], bytes]
) -> list[tuple[bytes, str]]:
    """Write ``items``; the dead letters (bytes, reason) of those the store refuses.

    The batch first; if the store refuses it, each item alone (the writers are idempotent,
    so what the failed batch left behind is written again harmlessly). Raises
    ``StoreUnavailable`` when the failure is not a refusal.
    """
    if not items:
        return []
    try:
        write(items)
        return []
    except Exception as error:  # noqa: BLE001 - classified below
        if not is_refusal(error):
            raise StoreUnavailable(store, error) from error
        if len(items) == 1:
            log.error("%s refused a record: %s", store, error)
            return [(raw_of(items[0]), refusal_reason(store, error))]
    letters: list[tuple[bytes, str]] = []
    for item in items:
        try:
            write([item])
        except Exception as error:  # noqa: BLE001
            if not is_refusal(error):
                raise StoreUnavailable(store, error) from error
            log.error("%s refused a record: %s", store, error)
            letters.append((raw_of(item), refusal_reason(store, error)))
    return letters


__all__ = ["StoreUnavailable", "is_refusal", "refusal_reason", "write_isolating"]
