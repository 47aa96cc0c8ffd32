"""The Kafka benchmark times nothing until the servers are warm (``warmed_up``): its
warm-up rounds go on until two consecutive rounds agree, and for at least
``WARM_UP_SECONDS`` (two early rounds can agree while the servers are still cold)."""

from __future__ import annotations

from agentlog.bench.kafka import WARM_UP_SECONDS, warmed_up

COLD = [3_969, 4_327]  # two rounds right after infra/up: they agree, the servers are cold
WARMING = [*COLD, 6_147, 10_226, 11_736]


def test_two_agreeing_rounds_of_cold_servers_are_not_warm_before_the_warm_up_s_time() -> None:
    assert not warmed_up(COLD, WARM_UP_SECONDS / 6)
    assert warmed_up(COLD, WARM_UP_SECONDS)  # the rule is the time and the agreement, no rate


def test_rounds_still_climbing_are_not_warm_however_long_they_took() -> None:
    assert not warmed_up(WARMING[:4], 10 * WARM_UP_SECONDS)  # 6,147 -> 10,226
    assert warmed_up(WARMING, WARM_UP_SECONDS)  # 10,226 -> 11,736: within 15%


def test_one_round_is_never_warm() -> None:
    assert not warmed_up([11_000], 10 * WARM_UP_SECONDS)
    assert not warmed_up([], 10 * WARM_UP_SECONDS)
