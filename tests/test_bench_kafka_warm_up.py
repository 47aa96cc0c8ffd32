"""The Kafka benchmark times nothing until the servers are warm: its warm-up rounds go on
until two consecutive rounds agree, and for at least ``WARM_UP_SECONDS`` (two early rounds
can agree while the servers are still cold)."""

from __future__ import annotations

from itertools import count
from pathlib import Path
from typing import Any

import pytest

from agentlog.bench import kafka as kafka_bench
from agentlog.streams.config import Settings


def _rounds(monkeypatch: pytest.MonkeyPatch, rates: list[int], seconds_each: float) -> list[int]:
    served = iter(rates)
    clock = count(0.0, seconds_each)
    monkeypatch.setattr(kafka_bench, "_warm_up_round", lambda *_a: next(served))
    monkeypatch.setattr(kafka_bench.time, "monotonic", lambda: next(clock))
    return kafka_bench.warm_up(Settings(data_dir=Path("unused")), "ns", [b"{}"], split=True)


def test_two_agreeing_rounds_of_cold_servers_do_not_end_the_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    cold, warm = [3_969, 4_327, 6_147], [10_226, 11_736, 10_911, 9_750, 10_121]
    seconds_each = kafka_bench.WARM_UP_SECONDS / 6
    done = _rounds(monkeypatch, [*cold, *warm, 10_500, 10_400], seconds_each)
    assert done[:2] == cold[:2]  # they agreed, within WARM_UP_AGREE
    assert len(done) >= 6 and done[-1] in warm + [10_500, 10_400]


def test_warm_servers_end_the_warm_up_at_the_first_agreement_after_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    rates = [11_000] * kafka_bench.WARM_UP_ROUNDS
    done = _rounds(monkeypatch, rates, kafka_bench.WARM_UP_SECONDS / 3)
    assert len(done) == 4  # the clock reads WARM_UP_SECONDS after the fourth round


def test_the_warm_up_gives_up_after_its_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    rates: list[Any] = [4_000, 8_000] * kafka_bench.WARM_UP_ROUNDS  # never two alike
    assert len(_rounds(monkeypatch, rates, 1.0)) == kafka_bench.WARM_UP_ROUNDS
