"""What a processed batch did, in the log, naming each thread and event: at INFO, which
``agentlog -v`` turns on in both deployments (a faust worker's handlers pass INFO and up
only, so a DEBUG line never reached its log). Both processors call it after each batch."""

from __future__ import annotations

import logging

from agentlog.processors.pipeline import BatchResult

log = logging.getLogger("agentlog.processor")


def log_batch(result: BatchResult) -> None:
    if log.isEnabledFor(logging.INFO):  # one line per event: built only when asked for
        for a in result.applied:
            log.info("applied thread=%s event=%s kind=%s offset=%d", a.event.thread_id, a.event.event_id,
                      a.event.kind, a.record.offset)  # fmt: skip
    for record, event in result.duplicates:
        log.info("duplicate thread=%s event=%s offset=%d ignored", event.thread_id, event.event_id, record.offset)


__all__ = ["log_batch"]
