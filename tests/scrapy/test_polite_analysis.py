"""Known answers of the politeness figures (tools.crawl.politeness) on a hand-made request log."""

from __future__ import annotations

import pytest

from tools.crawl.politeness import analyse, render
from tools.crawl.web import Hit

A, B = "127.0.0.2", "127.0.0.3"
DELAYS = {A: 1.0, B: 0.5}
PAGES = {(A, "/"), (A, "/p/1"), (A, "/p/2"), (A, "/p/3"), (B, "/"), (B, "/p/1")}
# Host A (delay 1): robots.txt, then pages 1.1, 0.4, 1.0, 1.5 and 1.0 s apart; a 429 at 2.0
# gives 2 s, so the request at 3.0 is inside it. Host B (delay 0.5): 0.1 and 0.5 s apart.
LOG = [
    Hit(A, "/robots.txt", "x", 200, 0.0),
    Hit(A, "/", "x", 200, 0.5),
    Hit(A, "/p/1", "y", 200, 1.6),
    Hit(A, "/p/2", "x", 429, 2.0, retry_after=2.0),
    Hit(A, "/p/2", "y", 429, 3.0, retry_after=1.0),
    Hit(A, "/p/2", "y", 200, 4.5),
    Hit(A, "/p/1", "x", 200, 5.5),
    Hit(B, "/robots.txt", "y", 200, 0.1),
    Hit(B, "/", "y", 200, 0.2),
    Hit(B, "/p/1", "x", 200, 0.3),
    Hit(B, "/p/1", "x", 503, 0.8),
]


def test_known_answers_per_host() -> None:
    """Per host: gaps kept with and without robots.txt, 429/503 answers, requests inside a window."""
    r = analyse(reversed(LOG), DELAYS, PAGES)  # any order: arrival time decides
    a, b = r["hosts"][A], r["hosts"][B]
    assert (a["requests"], a["robots"], a["gaps"], a["gaps_kept"]) == (7, 1, 5, 4)
    assert (a["gaps_kept_pct"], a["gaps_all"], a["gaps_kept_pct_all"]) == (80.0, 6, 66.67)
    assert (a["answers_429"], a["answers_503"], a["inside_retry_after"]) == (2, 0, 1)
    assert a["min_gap"] == pytest.approx(0.4)
    assert (b["gaps"], b["gaps_kept_pct"], b["gaps_kept_pct_all"]) == (2, 50.0, 33.33)
    assert (b["answers_429"], b["answers_503"], b["inside_retry_after"]) == (0, 1, 0)


def test_known_answers_totals() -> None:
    """Totals: gaps, answers, fetches per page, shares, wall time against the floor."""
    r = analyse(LOG, DELAYS, PAGES)
    assert (r["requests"], r["robots"], r["gaps"], r["gaps_kept_pct"]) == (11, 2, 7, 71.43)
    assert (r["gaps_all"], r["gaps_kept_pct_all"]) == (9, 55.56)
    assert (r["answers_429"], r["answers_503"], r["inside_retry_after"]) == (2, 1, 1)
    assert (r["pages"], r["fetched_once"], r["fetched_twice"], r["fetched_more"],
            r["never"], r["once_pct"]) == (6, 4, 1, 0, 1, 66.67)
    assert r["agents"] == {"x": {"requests": 6, "share_pct": 54.55},
                           "y": {"requests": 5, "share_pct": 45.45}}
    assert r["min_share_pct"] == 45.45
    assert (r["wall_s"], r["floor_s"], r["wall_over_floor"]) == (5.5, 4.0, 1.375)
    assert r["fetches_off_web"] == 0 and "revisit" not in r
    assert analyse(LOG, DELAYS, PAGES, wall_s=8.0)["wall_over_floor"] == 2.0


def test_known_answers_revisit() -> None:
    """A revisit run: changed pages fetched again, unchanged ones fetched, requests to gone ones."""
    r = analyse(LOG, DELAYS, PAGES, changed={(A, "/p/1"), (A, "/p/3")}, gone={(B, "/p/1")})
    assert r["revisit"] == {"changed": 2, "changed_refetched": 1, "changed_refetched_pct": 50.0,
                            "changed_whole": 1, "unchanged": 3, "unchanged_refetched": 3,
                            "gone": 1, "gone_requests": 2}


def test_known_answers_conditional_gets() -> None:
    """Answers 304 are fetches that sent no body: counted apart, and bodies are summed over
    page answers only (robots.txt left out); a changed page answered 304 is not whole."""
    log = [Hit(A, "/robots.txt", "x", 200, 0.0, size=40), Hit(A, "/", "x", 200, 1.0, size=900),
           Hit(A, "/p/1", "x", 304, 2.0), Hit(A, "/p/2", "y", 304, 3.0),
           Hit(A, "/p/3", "y", 200, 4.0, size=1000)]
    r = analyse(log, {A: 1.0}, {(A, "/"), (A, "/p/1"), (A, "/p/2"), (A, "/p/3")},
                changed={(A, "/p/1"), (A, "/p/3")})
    assert (r["answers_304"], r["body_bytes"], r["fetched_once"]) == (2, 1900, 4)
    assert (r["revisit"]["changed_refetched"], r["revisit"]["changed_whole"]) == (2, 1)
    assert "answers 304: 2; page bodies 1900 bytes" in render(r)


@pytest.mark.parametrize(("gap", "kept"), [(1.0, 1), (0.991, 1), (0.989, 0), (5.0, 1)])
def test_slack(gap: float, kept: int) -> None:
    """A gap keeps a 1 s delay from 10 ms short of it on (the hosts' own margin), not sooner."""
    log = [Hit(A, "/", "x", 200, 10.0), Hit(A, "/p/1", "x", 200, 10.0 + gap)]
    assert analyse(log, {A: 1.0}, {(A, "/"), (A, "/p/1")})["hosts"][A]["gaps_kept"] == kept


def test_retry_after_windows_overlap() -> None:
    """Windows merge: a short window given inside a long one does not end it early."""
    log = [Hit(A, "/", "x", 429, 0.0, retry_after=10.0), Hit(A, "/", "x", 429, 1.0, 1.0),
           Hit(A, "/", "y", 200, 5.0), Hit(A, "/", "y", 200, 11.0)]
    assert analyse(log, {A: 0.0}, {(A, "/")})["inside_retry_after"] == 2


def test_empty_log_and_off_web_fetches() -> None:
    """No requests: every page never fetched, no ratios; a fetch of no page of the web is counted."""
    r = analyse([], DELAYS, PAGES)
    assert (r["requests"], r["never"], r["gaps_kept_pct"], r["min_share_pct"]) == (0, 6, None, None)
    assert r["wall_over_floor"] == 0.0
    r = analyse([Hit(A, "/nope", "x", 404, 1.0)], DELAYS, PAGES)
    assert r["fetches_off_web"] == 1 and r["hosts"][A]["delay"] == 1.0


def test_render_names_every_figure() -> None:
    """The printout carries the headline figures and a line per host."""
    text = render(analyse(LOG, DELAYS, PAGES, changed={(A, "/p/1")}))
    for part in ("71.43% of 7 page gaps", "answers 429: 2, 503: 1", "Retry-After: 1",
                 "once 4 (66.67%)", "floor 4.0 s", "x 54.55% (6)", "revisit: changed 1", A, B):
        assert part in text


def test_known_answers_of_the_mean_gap_and_the_requests_in_flight() -> None:
    """The mean page gap over every host; with a latency of 0.5 s, each host's page
    requests answered at once: A's answered at 1.6 and 2.0 overlap, the rest do not; B's
    at 0.2 and 0.3 overlap, and the one at 0.8 arrives as the one at 0.3 is answered (no
    overlap)."""
    r = analyse(LOG, DELAYS, PAGES, latency=0.5)
    assert r["mean_gap"] == pytest.approx((5.0 + 0.6) / 7, abs=1e-4)
    mean_a = 6 * 0.5 / (5.5 - 0.0)
    mean_b = 3 * 0.5 / (0.8 - (0.2 - 0.5))
    assert r["in_flight_mean"] == pytest.approx(round((mean_a + mean_b) / 2, 3))
    assert r["in_flight_max"] == 2
    assert "in_flight_mean" not in analyse(LOG, DELAYS, PAGES)
