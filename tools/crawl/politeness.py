"""How politely a crawl treated the hosts of :mod:`tools.crawl.web`, from their request log.

:func:`analyse` takes the hosts' :class:`~tools.crawl.web.Hit` log (arrival times as the
hosts saw them, across every client) and returns plain figures, :func:`render` prints
them. Definitions, so that the figures mean one thing everywhere:

- a *gap* is the time between two consecutive request arrivals at one host; it *keeps
  the delay* when it is >= the host's crawl delay less ``slack`` (default
  :data:`tools.crawl.web.SLACK`, the margin the hosts themselves allow). Gaps are
  counted over every request (``_all``) and over page requests only (robots.txt left
  out, the figure the goal speaks of);
- a request is *inside a Retry-After* when it reaches a host (robots.txt left out)
  before the end of the last window that host gave in a 429 or 503 answer;
- a page is *fetched* by an answer other than 429 or 503; ``pages`` counts each page
  of the web fetched once, twice, more, never;
- a process is a user agent; its *share* is its part of all requests;
- the *floor* is the most pages one host has times its delay: no polite crawl ends sooner.

A revisit run (``changed`` given): of the pages that changed, the fraction fetched again
and how many of them answered in whole (200); how many unchanged pages, and how many gone
ones, were fetched. Every run: the answers 304 (a conditional GET of a page that did not
move) and the bytes of the page bodies sent.

With ``latency`` (seconds every answer of the hosts takes), a host's *in flight* is
how many of its page requests it was answering at once: on average its pages times the
latency over its busy time (first arrival to last answer), and at most; ``in_flight_mean``
averages the hosts (what AutoThrottle's target concurrency speaks of).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from .web import SLACK, Hit

ROBOTS = "/robots.txt"
LIMITED = (429, 503)


def _pct(part: int, whole: int) -> float | None:
    return None if whole == 0 else round(100.0 * part / whole, 2)


def _gaps(times: list[float], delay: float, slack: float) -> dict[str, Any]:
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    ok = sum(g >= delay - slack for g in gaps)
    return {"gaps": len(gaps), "kept": ok, "kept_pct": _pct(ok, len(gaps)),
            "min_gap": round(min(gaps), 4) if gaps else None, "sum": sum(gaps)}


def _host(hits: list[Hit], delay: float, slack: float) -> dict[str, Any]:
    """The figures of one host from its hits in arrival order."""
    pages = [h for h in hits if h.path != ROBOTS]
    inside, blocked_until = 0, float("-inf")
    for h in pages:
        if h.at < blocked_until:
            inside += 1
        if h.status in LIMITED and h.retry_after > 0:
            blocked_until = max(blocked_until, h.at + h.retry_after)
    every = _gaps([h.at for h in hits], delay, slack)
    page = _gaps([h.at for h in pages], delay, slack)
    return {
        "delay": delay, "requests": len(hits), "robots": len(hits) - len(pages),
        "gaps": page["gaps"], "gaps_kept": page["kept"], "gaps_kept_pct": page["kept_pct"],
        "min_gap": page["min_gap"], "gaps_sum": page["sum"], "gaps_all": every["gaps"],
        "gaps_kept_all": every["kept"],
        "gaps_kept_pct_all": every["kept_pct"],
        "answers_429": sum(h.status == 429 for h in hits),
        "answers_503": sum(h.status == 503 for h in hits),
        "inside_retry_after": inside,
    }


def _in_flight(answered: list[float], latency: float) -> tuple[float, int] | None:
    """(mean, most) page requests a host answered at once, each answered ``latency``
    after it arrived (None: fewer than two requests)."""
    if len(answered) < 2:
        return None
    span = answered[-1] - (answered[0] - latency)
    events = sorted([(t - latency, 1) for t in answered] + [(t, -1) for t in answered])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return len(answered) * latency / span, most


def analyse(hits: Iterable[Hit], delays: Mapping[str, float],
            pages: Collection[tuple[str, str]], wall_s: float | None = None,
            changed: Collection[tuple[str, str]] | None = None,
            gone: Collection[tuple[str, str]] = (), slack: float = SLACK,
            latency: float = 0.0) -> dict[str, Any]:
    """The politeness figures of a crawl (see the module docstring).

    hits: the hosts' log; delays: each host's crawl delay in seconds (a host not named
    has 0); pages: every (host, path) the crawl should fetch; wall_s: the crawl's wall
    time (default: first to last arrival); changed, gone: the pages that changed and
    that went away since the previous crawl, for a revisit run; latency: the seconds
    each answer took at the hosts (the in-flight figures).
    """
    ordered = sorted(hits, key=lambda h: h.at)
    by_host: dict[str, list[Hit]] = defaultdict(list)
    for h in ordered:
        by_host[h.host].append(h)
    hosts = {host: _host(hs, float(delays.get(host, 0.0)), slack)
             for host, hs in sorted(by_host.items())}
    total = {k: sum(x[k] for x in hosts.values())
             for k in ("gaps", "gaps_kept", "gaps_all", "gaps_kept_all", "answers_429",
                       "answers_503", "inside_retry_after", "robots")}
    fetches = Counter((h.host, h.path) for h in ordered
                      if h.path != ROBOTS and h.status not in LIMITED)
    per_page = Counter(min(fetches.get(p, 0), 3) for p in pages)
    agents = Counter(h.agent for h in ordered)
    shares = {a: _pct(n, len(ordered)) for a, n in sorted(agents.items())}
    per_host_pages = Counter(host for host, _ in pages)
    floor = max((n * float(delays.get(host, 0.0)) for host, n in per_host_pages.items()),
                default=0.0)
    if wall_s is None:
        wall_s = ordered[-1].at - ordered[0].at if ordered else 0.0
    out: dict[str, Any] = {
        "requests": len(ordered), "robots": total["robots"],
        "gaps": total["gaps"], "gaps_kept_pct": _pct(total["gaps_kept"], total["gaps"]),
        "mean_gap": round(sum(x["gaps_sum"] for x in hosts.values()) / total["gaps"], 4)
        if total["gaps"] else None,
        "gaps_all": total["gaps_all"],
        "gaps_kept_pct_all": _pct(total["gaps_kept_all"], total["gaps_all"]),
        "answers_429": total["answers_429"], "answers_503": total["answers_503"],
        "inside_retry_after": total["inside_retry_after"],
        "answers_304": sum(h.status == 304 for h in ordered),
        "body_bytes": sum(h.size for h in ordered if h.path != ROBOTS),
        "pages": len(pages), "fetched_once": per_page[1], "fetched_twice": per_page[2],
        "fetched_more": per_page[3], "never": per_page[0],
        "once_pct": _pct(per_page[1], len(pages)),
        "fetches_off_web": sum(n for p, n in fetches.items() if p not in pages),
        "agents": {a: {"requests": agents[a], "share_pct": s} for a, s in shares.items()},
        "min_share_pct": min((s for s in shares.values() if s is not None), default=None),
        "wall_s": round(wall_s, 3), "floor_s": round(floor, 3),
        "wall_over_floor": round(wall_s / floor, 3) if floor > 0 else None,
        "hosts": hosts,
    }
    if latency > 0:
        flights = [_in_flight([h.at for h in hs if h.path != ROBOTS], latency)
                   for hs in by_host.values()]
        flights = [f for f in flights if f is not None]
        out["in_flight_mean"] = round(sum(f[0] for f in flights) / len(flights), 3) \
            if flights else None
        out["in_flight_max"] = max((f[1] for f in flights), default=None)
    if changed is not None:
        changed_set, gone_set = set(changed), set(gone)
        unchanged = set(pages) - changed_set - gone_set
        again = sum(fetches.get(p, 0) > 0 for p in changed_set)
        out["revisit"] = {
            "changed": len(changed_set), "changed_refetched": again,
            "changed_refetched_pct": _pct(again, len(changed_set)),
            "changed_whole": len({(h.host, h.path) for h in ordered
                                  if h.status == 200 and (h.host, h.path) in changed_set}),
            "unchanged": len(unchanged),
            "unchanged_refetched": sum(fetches.get(p, 0) > 0 for p in unchanged),
            "gone": len(gone_set), "gone_requests": sum(
                1 for h in ordered if (h.host, h.path) in gone_set),
        }
    return out


def render(result: Mapping[str, Any]) -> str:
    """The figures of :func:`analyse` as a few lines of text, a line per host."""
    r = result
    lines = [
        f"requests {r['requests']} (robots.txt {r['robots']}); gaps >= delay: "
        f"{r['gaps_kept_pct']}% of {r['gaps']} page gaps (mean {r['mean_gap']} s), "
        f"{r['gaps_kept_pct_all']}% of {r['gaps_all']} with robots.txt",
        f"answers 429: {r['answers_429']}, 503: {r['answers_503']}; requests inside "
        f"Retry-After: {r['inside_retry_after']}; answers 304: {r['answers_304']}; page "
        f"bodies {r['body_bytes']} bytes",
        f"pages {r['pages']}: once {r['fetched_once']} ({r['once_pct']}%), twice "
        f"{r['fetched_twice']}, more {r['fetched_more']}, never {r['never']}",
        f"wall {r['wall_s']} s, floor {r['floor_s']} s, ratio {r['wall_over_floor']}",
        "shares: " + ", ".join(f"{a} {v['share_pct']}% ({v['requests']})"
                               for a, v in r["agents"].items()),
    ]
    if r.get("in_flight_mean") is not None:
        lines.append(f"in flight at a host: {r['in_flight_mean']} on average, "
                     f"{r['in_flight_max']} at most")
    if "revisit" in r:
        v = r["revisit"]
        lines.append(f"revisit: changed {v['changed']}, refetched {v['changed_refetched']} "
                     f"({v['changed_refetched_pct']}%); unchanged {v['unchanged']}, refetched "
                     f"{v['unchanged_refetched']}; gone {v['gone']}, requests to them "
                     f"{v['gone_requests']}")
        if v.get("timing_ok") is False:
            lines.append(f"revisit: NOT MEANINGFUL, the spiders opened {v['early_s']} s after "
                         "the previous round's first page, not less than twice the wait: pages "
                         "found unchanged were due again (a longer --revisit-min)")
    lines.append(f"  {'host':<12} {'delay':>6} {'reqs':>5} {'gaps ok%':>8} {'all ok%':>8} "
                 f"{'min gap':>8} {'429':>4} {'503':>4} {'in RA':>5}")
    for host, h in r["hosts"].items():
        lines.append(f"  {host:<12} {h['delay']:>6g} {h['requests']:>5} "
                     f"{_show(h['gaps_kept_pct']):>8} {_show(h['gaps_kept_pct_all']):>8} "
                     f"{_show(h['min_gap']):>8} {h['answers_429']:>4} {h['answers_503']:>4} "
                     f"{h['inside_retry_after']:>5}")
    return "\n".join(lines)


def _show(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"
