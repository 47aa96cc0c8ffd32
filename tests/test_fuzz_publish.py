"""Bad input loses nothing: 10,000 hostile records through publish, zero crashes, each one
dead-lettered with its reason and original bytes, every valid event stored once."""

from __future__ import annotations

import random

import orjson

from agentlog.streams.embedded.service import EmbeddedService
from tests.helpers import raw

N_HOSTILE = 10_000


def hostile(rng: random.Random, i: int) -> bytes:
    good = {"event_id": f"h{i}", "thread_id": "fz", "kind": "message", "ts": "2026-01-01T00:00:00Z",
            "payload": {"role": "user", "text": "hi"}}  # fmt: skip
    choice = rng.randrange(12)
    if choice == 0:  # random bytes, often invalid UTF-8
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b"\x00").replace(b"\r", b"\x00")  # CR LF ends a line too
        return b"\x80" + body
    if choice == 1:  # truncated JSON
        full = orjson.dumps(good)
        return full[: rng.randrange(1, len(full) - 1)]
    if choice == 2:  # wrong types
        field = rng.choice(["event_id", "thread_id", "ts", "payload", "kind"])
        return orjson.dumps({**good, field: rng.choice([1, 2.5, None, [], True])})
    if choice == 3:  # unknown kind
        return orjson.dumps({**good, "kind": rng.choice(["teleport", "MESSAGE", "", "tool-call"])})
    if choice == 4:  # ids outside the alphabet or too long
        bad = rng.choice(["a b", "é", "x/y", "", "a" * 129, "id\u0001", "<script>", "a\tb"])
        return orjson.dumps({**good, rng.choice(["event_id", "thread_id"]): bad})
    if choice == 5:  # raw control characters inside strings are not JSON
        return orjson.dumps(good).replace(b"hi", b"h\x01\x02i")
    if choice == 6:  # payloads of the wrong shape
        return orjson.dumps({**good, "payload": rng.choice([{"role": "robot", "text": "x"}, {"text": 5}, {}, "x"])})
    if choice == 7:  # missing required fields
        d = dict(good)
        del d[rng.choice(["event_id", "thread_id", "kind", "ts", "payload"])]
        return orjson.dumps(d)
    if choice == 8:  # not an object
        return rng.choice([b"[]", b"42", b"null", b'"event"', b"true", b"[{}]"])
    if choice == 9:  # timestamps without offset or in the wrong format
        return orjson.dumps({**good, "ts": rng.choice(["2026-01-01T00:00:00", "yesterday", "2026-13-01T00:00:00Z", "1767225600"])})
    if choice == 10:  # deep nesting
        depth = rng.randrange(200, 2000)
        return b'{"event_id":"x","payload":' + b"[" * depth + b"]" * depth + b"}"
    return orjson.dumps({**good, "kind": "tool_result", "payload": {"call_id": "c", "output": "o", "status": "lost"}})


def test_ten_thousand_hostile_records_are_dead_lettered_and_valid_ones_stored_once(
    service: EmbeddedService,
) -> None:
    rng = random.Random(1234)
    records: list[bytes] = []
    hostile_records: list[bytes] = []
    valid_ids: list[str] = []
    for i in range(N_HOSTILE):
        h = hostile(rng, i)
        assert h.strip() and b"\n" not in h
        hostile_records.append(h)
        records.append(h)
        if i % 20 == 0:  # valid events around them, some delivered twice
            eid = f"ok{i}"
            valid_ids.append(eid)
            event = raw(eid, "message", {"role": "user", "text": f"valid {i}"}, i, thread=f"th{i % 7}")
            records.append(event)
            if i % 100 == 0:
                records.append(event)
    # Two oversized records as well (the size limit is 1 MiB).
    for j in range(2):
        big = raw(f"big{j}", "message", {"role": "user", "text": "x" * (1024 * 1024 + 10)})
        hostile_records.append(big[: 1024 * 1024])  # dead-lettered as a bounded prefix
        records.append(big)

    report = service.publish(b"\n".join(records))
    assert report.rejected == len(hostile_records)
    service.catch_up()

    stored = service.log.rejected()
    assert [r for r, _ in stored] == hostile_records
    assert all(reason and ":" in reason for _, reason in stored)
    result = service.sql("SELECT count(), uniqExact(event_id) FROM events")
    assert result.rows[0] == (len(valid_ids), len(valid_ids))
    ids = service.sql("SELECT event_id FROM events ORDER BY event_id")
    assert sorted(r[0] for r in ids.rows) == sorted(valid_ids)
