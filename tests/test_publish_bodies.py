"""SPEC §7: `publish` and `POST /events` take JSON lines or JSON; each record is judged alone."""

from __future__ import annotations

import orjson

from agentlog.streams.publish_check import split_records
from tests.helpers import raw


def test_json_lines_give_one_record_per_line_skipping_blank_lines_and_carriage_returns() -> None:
    a, b = raw("e1", "goal", {"text": "g"}), raw("e2", "goal", {"text": "h"})
    assert split_records(a + b"\r\n\n" + b + b"\n") == [a, b]


def test_a_json_array_gives_its_items() -> None:
    a, b = orjson.loads(raw("e1", "goal", {"text": "g"})), orjson.loads(raw("e2", "goal", {"text": "h"}))
    assert [orjson.loads(r) for r in split_records(orjson.dumps([a, b]))] == [a, b]


def test_one_pretty_printed_object_is_one_record_kept_as_sent() -> None:
    body = orjson.dumps(orjson.loads(raw("e1", "goal", {"text": "g"})), option=orjson.OPT_INDENT_2)
    assert split_records(body + b"\n") == [body]


def test_a_malformed_line_among_json_lines_is_its_own_record() -> None:
    a = raw("e1", "goal", {"text": "g"})
    assert split_records(a + b"\n{not json\n" + a) == [a, b"{not json", a]
