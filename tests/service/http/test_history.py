"""The console's history (service/http/history.py): per-second rates from the broker's counters,
group lag, aligned series, bounded memory."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from service.http.history import History


class _Log:
    def __init__(self, hw: int) -> None:
        self.high_watermark = hw


class _Groups:
    def __init__(self) -> None:
        self.offsets: dict[str, dict[tuple[str, int], int]] = {}

    def list_groups_by_type(self) -> list[tuple[str, str, str, str]]:
        return [(g, "consumer", "Stable", "classic") for g in self.offsets]

    def committed_offsets(self) -> dict[str, dict[tuple[str, int], int]]:
        return self.offsets


class _View:
    """The members of MetricsView that History reads."""

    def __init__(self) -> None:
        self.bytes_in: Counter[str] = Counter()
        self.bytes_out: Counter[str] = Counter()
        self.records_in: Counter[str] = Counter()
        self.records_out: Counter[str] = Counter()
        self.hosted: dict[tuple[str, int], _Log] = {}
        self.groups = _Groups()
        self.logs = SimpleNamespace(all_logs=lambda: self.hosted, get_log=lambda t, p: self.hosted.get((t, p)),
                                    hosted_topics=lambda: {t for t, _ in self.hosted})


def _history(view: _View, keep: int = 5) -> tuple[History, list[float]]:
    now = [1000.0]
    history = History(view, interval_s=2.0, keep=keep, clock=lambda: now[0])  # type: ignore[arg-type]
    return history, now


def test_rates_are_deltas_over_the_interval_per_topic_and_in_total() -> None:
    view = _View()
    view.hosted[("a", 0)] = _Log(0)
    history, now = _history(view)
    history.sample()  # the baseline
    assert history.series()["timestamps"] == [] and history.rates()["bytes_in_per_sec"] == 0
    view.bytes_in["a"] += 4000
    view.records_in["a"] += 40
    now[0] += 2
    history.sample()
    assert history.rates() == {"bytes_in_per_sec": 2000.0, "bytes_out_per_sec": 0.0,
                               "records_in_per_sec": 20.0, "records_out_per_sec": 0.0}
    assert history.topic_rates("a") == (2000.0, 0.0)
    now[0] += 2
    history.sample()  # nothing new: the rate falls back to 0
    assert history.series(["a"])["topics"]["a"]["bytes_in_per_sec"] == [2000.0, 0.0]
    assert history.series()["timestamps"] == [1002.0, 1004.0]


def test_series_stay_aligned_when_topics_and_groups_come_and_go() -> None:
    view = _View()
    history, now = _history(view, keep=4)
    history.sample()
    for step in range(1, 7):  # more samples than kept: the ring wraps
        now[0] += 2
        if step == 3:
            view.hosted[("b", 0)] = _Log(10)
            view.groups.offsets["g"] = {("b", 0): 4}
        if step >= 3:
            view.bytes_in["b"] += 200
        if step == 5:
            view.hosted[("b", 0)].high_watermark = 16
        history.sample()
    got = history.series(["b", "missing"], ["g"])
    assert len(got["timestamps"]) == 4 and got["timestamps"][-1] == now[0]
    assert got["topics"]["b"]["bytes_in_per_sec"] == [100.0, 100.0, 100.0, 100.0]
    assert got["groups"]["g"]["lag"] == [6.0, 6.0, 12.0, 12.0]
    assert got["topics"]["missing"]["bytes_in_per_sec"] == [None] * 4

    del view.hosted[("b", 0)]  # the topic is deleted; the group's offsets expire
    view.groups.offsets.clear()
    now[0] += 2
    history.sample()
    got = history.series(["b"], ["g"])
    assert got["topics"]["b"]["bytes_in_per_sec"] == [None] * 4
    assert got["groups"]["g"]["lag"] == [None] * 4


def test_a_series_that_starts_late_is_padded_with_nothing_known() -> None:
    view = _View()
    history, now = _history(view, keep=10)
    history.sample()
    for _ in range(3):
        now[0] += 2
        history.sample()
    view.hosted[("late", 0)] = _Log(0)
    view.bytes_in["late"] = 50
    now[0] += 2
    history.sample()
    assert history.series(["late"])["topics"]["late"]["bytes_in_per_sec"] == [None, None, None, 25.0]


def test_series_past_the_limit_are_not_kept_but_totals_are() -> None:
    view = _View()
    now = [0.0]
    history = History(view, keep=3, max_series=2, clock=lambda: now[0])  # type: ignore[arg-type]
    for name in "abc":
        view.hosted[(name, 0)] = _Log(0)
    history.sample()
    for name in "abc":
        view.bytes_in[name] += 10
    now[0] += 1
    history.sample()
    got: Any = history.series(["a", "b", "c"])
    assert [got["topics"][n]["bytes_in_per_sec"] for n in "abc"] == [[10.0], [10.0], [None]]
    assert got["totals"]["bytes_in_per_sec"] == [30.0]
