"""simstore.scrapy without a crawl: page text, the middleware's decisions against a brute-force
oracle, bad responses, settings, the pipeline, and that ``import simstore`` needs no Scrapy."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

pytest.importorskip("scrapy")

from scrapy import signals  # noqa: E402
from scrapy.exceptions import DropItem, IgnoreRequest, NotConfigured  # noqa: E402
from scrapy.http import HtmlResponse, Request, Response  # noqa: E402
from scrapy.utils.test import get_crawler  # noqa: E402

import simstore  # noqa: E402
from simstore.scrapy import (  # noqa: E402
    NearDuplicateMiddleware,
    NearDuplicatePipeline,
    page_text,
)
from simstore.scrapy._crawler import Refused  # noqa: E402
from tools.crawl.site import Site  # noqa: E402

from ..oracles import shares_band, sketch_estimate  # noqa: E402

MW = {"simstore.scrapy.NearDuplicateMiddleware": 575}


@pytest.fixture(scope="module")
def site() -> Site:
    return Site(articles=12)


def html(url: str, body: bytes | str, ctype: str = "text/html; charset=utf-8",
         status: int = 200, meta: dict | None = None) -> HtmlResponse:
    data = body.encode() if isinstance(body, str) else body
    return HtmlResponse(url, body=data, status=status, headers={"Content-Type": ctype},
                        request=Request(url, meta=meta or {}))


def page(site: Site, path: str) -> HtmlResponse:
    status, ctype, body = site.render(path)
    return html("http://127.0.0.1" + path, body, ctype, status)


def middleware(tmp_path, **settings):
    crawler = get_crawler(settings_dict={"SIMSTORE_PATH": str(tmp_path / "store"), **settings})
    return NearDuplicateMiddleware.from_crawler(crawler), crawler


def stats(crawler) -> dict:
    return {k: v for k, v in crawler.stats.get_stats().items() if k.startswith("simstore/")}


def run(mw, resp: Response) -> bool:
    """True if the middleware passed the response on, False if it raised IgnoreRequest.

    process_response's steps in this thread (the crawl tests run the coroutine itself)."""
    check, text = mw.to_check(resp.request, resp)
    try:
        if check:
            assert mw.settle(resp, mw.judge([resp.url], [text])[0]) is resp
        return True
    except IgnoreRequest:
        return False


# --------------------------------------------------------------------------- page text


def test_page_text_is_main_without_boilerplate():
    """The text comes from <main>, leaving out nav, footer, script and style."""
    r = html("http://x/", "<html><body><nav>Home About</nav><main><h1>Title</h1><p>Body "
                          "text</p><script>var x=1</script><style>p{}</style><footer>foot"
                          "</footer></main><p>outside</p></body></html>")
    assert page_text(r).split() == ["Title", "Body", "text"]


def test_page_text_falls_back_to_body():
    """Without <main> the body's text is used, still without navigation."""
    r = html("http://x/", "<html><head><title>T</title></head><body><nav>menu</nav><p>one"
                          "</p><div>two</div></body></html>")
    assert page_text(r).split() == ["one", "two"]


# --------------------------------------------------------------------------- decisions


def test_copies_are_dropped_and_the_first_is_kept(site, tmp_path, caplog):
    """A page is passed once; its print view, session copy and archive copy are ignored,
    each logged at DEBUG with the URL it duplicates."""
    mw, crawler = middleware(tmp_path)
    caplog.set_level(logging.DEBUG, logger="simstore.scrapy")
    assert run(mw, page(site, "/article/3"))
    for copy in ("/article/3/print", "/article/3?sid=abc", "/archive/3",
                 "/article/3?utm_source=x"):
        assert not run(mw, page(site, copy)), copy
    assert run(mw, page(site, "/article/4"))
    assert stats(crawler) == {"simstore/new": 2, "simstore/near_duplicate": 4}
    drops = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(drops) == 4
    assert all(r.getMessage().endswith("with http://127.0.0.1/article/3)") for r in drops)
    assert len(mw.gate.store) == 2


def test_decisions_equal_the_brute_force_rule(site, tmp_path):
    """Over every page and copy of the site, in a shuffled order, a page is dropped exactly
    when an earlier kept page shares a band key with it and its sketch estimate is >= 0.9."""
    import random

    paths = ["/", "/misc", "/calendar/2026/11", "/calendar/2026/12", "/calendar/2027/3"]
    paths += [f"/section/{s}" for s in site.sections()]
    for a in site.items:
        paths += [f"/article/{a.n}", f"/article/{a.n}/print", f"/archive/{a.n}"]
    random.Random(5).shuffle(paths)
    mw, _ = middleware(tmp_path)
    kept: list[simstore.Signature] = []
    kept_ids = set()
    for p in paths:
        resp = page(site, p)
        sig = simstore.signature(page_text(resp), simstore.SIGNATURE_CONFIG)
        near = any(shares_band(sig.bands, k.bands) and sketch_estimate(sig.sketch, k.sketch)
                   >= 0.9 for k in kept)
        assert run(mw, resp) is not near, p
        if not near:
            kept.append(sig)
            kept_ids.add(resp.css('meta[name="page-id"]::attr(content)').get())
    # Every distinct page is kept (the odd-* pages were not given); a copy kept too is one
    # whose first kept copy is not near it (a print view and an archive copy, say).
    assert kept_ids == {i for i in site.distinct_ids() if not i.startswith("odd-")}
    assert len(mw.gate.store) == len(kept)


def test_dont_simstore_meta_skips_the_check(site, tmp_path):
    """A request with meta dont_simstore is passed on, counted as skipped and not stored."""
    mw, crawler = middleware(tmp_path)
    r = page(site, "/article/1")
    r = html(r.url, r.body, meta={"dont_simstore": True})
    assert run(mw, r) and run(mw, r)
    assert len(mw.gate.store) == 0
    assert stats(crawler) == {"simstore/skipped": 2, "simstore/skipped/dont_simstore": 2}


LATIN = "<html><body><p>Le café a fermé après trente années; les crêpes manquent.</p></body></html>"
BAD = [
    ("binary", lambda: html("http://x/b", b"\x00\x01PK\x03" + bytes(range(256)) * 8), "binary"),
    ("10 MB", lambda: html("http://x/big", "<html><body><p>" + "word " * (2 * 2**20) + "</p>"),
     "too_large"),
    ("empty body", lambda: html("http://x/e", b""), "empty"),
    ("no words", lambda: html("http://x/p", "<html><body><p>... !!! ---</p></body></html>"),
     "empty"),
    ("image", lambda: Response("http://x/i.png", body=b"\x89PNG\r\n",
                               headers={"Content-Type": "image/png"},
                               request=Request("http://x/i.png")), "not_html"),
    ("404", lambda: html("http://x/404", "<html><body>gone</body></html>", status=404), "status"),
    ("broken extractor", lambda: html("http://x/t", "<p>text</p>"), "error"),
]


@pytest.mark.parametrize("name,make,reason", BAD, ids=[b[0] for b in BAD])
def test_bad_responses_are_passed_on_and_counted(tmp_path, name, make, reason):
    """A response with no text to check never raises: passed on, counted under its reason."""
    extra = {"SIMSTORE_TEXT": "tests.scrapy.test_scrapy.broken"} if reason == "error" else {}
    mw, crawler = middleware(tmp_path, **extra)
    assert run(mw, make())
    assert stats(crawler) == {"simstore/skipped": 1, f"simstore/skipped/{reason}": 1}
    assert len(mw.gate.store) == 0


def broken(response):
    """An extractor that fails (used through SIMSTORE_TEXT)."""
    raise ValueError("cannot parse")


@pytest.mark.parametrize("body,ctype", [
    (LATIN.encode("latin-1"), "text/html"),  # undeclared charset
    (LATIN.encode("cp1252"), "text/html; charset=utf-8"),  # a wrong one
    (LATIN.encode("latin-1"), "text/html; charset=no-such-charset"),
])
def test_odd_encodings_are_checked_and_copies_still_caught(tmp_path, body, ctype):
    """Undeclared, wrong or unknown charsets decode as well as they can and are checked:
    the page is kept, the same bytes again are a near-duplicate."""
    mw, crawler = middleware(tmp_path)
    assert run(mw, html("http://x/a", body, ctype))
    assert not run(mw, html("http://x/b", body, ctype))
    assert stats(crawler) == {"simstore/new": 1, "simstore/near_duplicate": 1}


def test_store_failure_passes_the_page_on(site, tmp_path, caplog):
    """A store that fails (here: closed) makes no page vanish: passed on, counted, logged."""
    mw, crawler = middleware(tmp_path)
    mw.gate.close()
    assert run(mw, page(site, "/article/2"))
    assert stats(crawler) == {"simstore/skipped": 1, "simstore/skipped/store_error": 1}
    assert any(r.levelno == logging.ERROR for r in caplog.records)


def test_pages_waiting_together_share_one_transaction(site, tmp_path):
    """Pages queued while a transaction runs go into the next one, and their verdicts are
    those of one check per page in arrival order (a second store is the oracle)."""
    import threading

    from simstore.scrapy import Gate
    from simstore.scrapy._commit import Committer

    gate, oracle = Gate(tmp_path / "a"), Gate(tmp_path / "b")
    hold, groups = threading.Event(), []

    def decide(ids, texts):
        hold.wait(10)
        groups.append(len(ids))
        return gate.check_many(ids, texts)

    paths = ["/article/0", "/article/1", "/article/0/print", "/archive/1", "/article/2",
             "/article/2?sid=a", "/section/world", "/article/3/print", "/article/3"]
    pages = [page(site, p) for p in paths]
    texts = [page_text(r) for r in pages]
    c = Committer(decide)
    futs = [c.submit(r.url, t) for r, t in zip(pages, texts, strict=True)]
    hold.set()
    c.close()
    assert groups[0] >= 1 and sum(groups) == len(paths) and len(groups) < len(paths)
    expected = [oracle.check(r.url, t) for r, t in zip(pages, texts, strict=True)]
    assert [f.result() for f in futs] == expected
    assert [v.new for v in expected] == [True, True, False, False, True, False, True, True,
                                         False]


# --------------------------------------------------------------------------- settings


def test_no_path_disables_the_middleware():
    """Without SIMSTORE_PATH the middleware is not configured (Scrapy leaves it out)."""
    with pytest.raises(NotConfigured):
        NearDuplicateMiddleware.from_crawler(get_crawler())


def test_store_closes_with_the_spider_and_keeps_its_pages(site, tmp_path):
    """spider_closed closes the store; reopened, it still holds the kept page."""
    mw, crawler = middleware(tmp_path)
    run(mw, page(site, "/article/5"))
    crawler.signals.send_catch_log(signal=signals.spider_closed, spider=None, reason="finished")
    with pytest.raises(simstore.StoreClosedError):
        len(mw.gate.store)
    with simstore.SimStore(tmp_path / "store") as s:
        assert list(s) == ["http://127.0.0.1/article/5"]


def test_threshold_setting_changes_the_rule(site, tmp_path):
    """SIMSTORE_THRESHOLD = 1.0 keeps the archive copy (estimate < 1) that 0.9 drops."""
    mw, _ = middleware(tmp_path, SIMSTORE_THRESHOLD="1.0")
    assert mw.gate.threshold == 1.0
    assert run(mw, page(site, "/article/6"))
    assert run(mw, page(site, "/archive/6"))
    assert not run(mw, page(site, "/article/6?sid=x"))


def test_k_setting_makes_a_fingerprint_store(site, tmp_path):
    """SIMSTORE_K on a new path creates a fingerprint store checked at Hamming <= k."""
    mw, _ = middleware(tmp_path, SIMSTORE_K="3")
    assert (mw.gate.k, mw.gate.threshold) == (3, None)
    assert not mw.gate.store.config.has_signature and mw.gate.store.k >= 3
    assert run(mw, page(site, "/article/7"))
    assert not run(mw, page(site, "/article/7?sid=y"))


def test_k_setting_on_a_similarity_store(site, tmp_path, caplog):
    """SIMSTORE_K on a similarity store checks the Hamming distance of its fingerprints."""
    simstore.SimStore(tmp_path / "store", config=simstore.SIGNATURE_CONFIG).close()
    mw, _ = middleware(tmp_path, SIMSTORE_K="3")
    assert (mw.gate.k, mw.gate.threshold) == (3, None) and mw.gate.store.config.has_signature
    caplog.set_level(logging.DEBUG, logger="simstore.scrapy")
    assert run(mw, page(site, "/article/8"))
    assert not run(mw, page(site, "/article/8?sid=z"))
    assert "Hamming distance 0 with http://127.0.0.1/article/8" in caplog.text


def test_a_fingerprint_store_says_otherwise(tmp_path):
    """An existing fingerprint store gives its own k; a threshold on it is refused."""
    simstore.SimStore(tmp_path / "store", k=4).close()
    mw, _ = middleware(tmp_path)
    assert (mw.gate.k, mw.gate.threshold) == (4, None)
    mw.gate.close()
    refused, _ = middleware(tmp_path, SIMSTORE_THRESHOLD=0.8)
    assert isinstance(refused, Refused)
    assert "fingerprints only" in str(refused.error)


@pytest.mark.parametrize("settings,match", [
    ({"SIMSTORE_K": 3, "SIMSTORE_THRESHOLD": 0.9}, "not both"),
    ({"SIMSTORE_K": "three"}, "SIMSTORE_K must be an int"),
    ({"SIMSTORE_THRESHOLD": "1.5"}, "threshold"),
    ({"SIMSTORE_EXPIRE": "banana"}, "SIMSTORE_EXPIRE must be an age"),
    ({"SIMSTORE_EXPIRE": "-3d"}, "SIMSTORE_EXPIRE must be an age"),
    ({"SIMSTORE_MODE": "dorp"}, "SIMSTORE_MODE must be one of"),
])
@pytest.mark.parametrize("component", [NearDuplicateMiddleware, NearDuplicatePipeline])
def test_bad_settings_are_refused(tmp_path, settings, match, component):
    """Contradictory or malformed settings give a Refused component whose error names the
    problem (one ERROR line at spider_opened, then the crawl closes), which passes
    nothing; the store is never created."""
    crawler = get_crawler(settings_dict={"SIMSTORE_PATH": str(tmp_path / "store"), **settings})
    refused = component.from_crawler(crawler)
    assert isinstance(refused, Refused)
    assert isinstance(refused.error, simstore.SimstoreValueError)
    assert match in str(refused.error) and "\n" not in str(refused.error)
    with pytest.raises(IgnoreRequest):
        refused.process_request(Request("http://x/"))
    with pytest.raises(DropItem):
        refused.process_item({"text": "a b c"})
    assert not (tmp_path / "store").exists()


def test_same_url_is_unchanged_or_changed_never_its_own_duplicate(site, tmp_path):
    """A page fetched again under its own URL passes as unchanged (its stored time
    refreshed, nothing added); changed, it passes and replaces the stored one; only a copy
    under another URL is dropped."""
    mw, crawler = middleware(tmp_path)
    store = mw.gate.store
    first = page(site, "/article/3")
    assert run(mw, first)
    assert first.meta["simstore"] == "new"  # the verdict, for the spider
    store.touch(first.url, at=1000.0)
    again = page(site, "/article/3")
    assert run(mw, again)  # a rerun of a crawl: unchanged
    assert again.meta["simstore"] == "unchanged"
    assert store.stored_at(first.url) > 1000.0
    other = page(site, "/article/5")
    changed = html(first.url, other.body, status=200)  # its content replaced
    assert run(mw, changed)
    assert not run(mw, other)  # near the changed /article/3 now
    assert stats(crawler) == {"simstore/new": 1, "simstore/unchanged": 1, "simstore/changed": 1,
                              "simstore/near_duplicate": 1}
    assert len(store) == 1


def test_a_304_is_unchanged_and_renews_the_stored_page(site, tmp_path):
    """A 304 (Not Modified: a revisit's conditional GET) passes as unchanged, the page stored
    under its URL renewed and nothing added; a 304 for a URL never stored passes as
    unchanged, stores nothing and is marked to be fetched whole at its next revisit; with
    ``dont_simstore`` it is not checked."""
    mw, crawler = middleware(tmp_path)
    store = mw.gate.store
    assert run(mw, page(site, "/article/3"))
    url = "http://127.0.0.1/article/3"
    store.touch(url, at=1000.0)
    not_modified = html(url, b"", status=304)
    assert run(mw, not_modified)
    assert not_modified.meta["simstore"] == "unchanged"
    assert store.stored_at(url) > 1000.0 and len(store) == 1
    assert "simstore_refetch" not in not_modified.meta
    stranger = html("http://127.0.0.1/never-fetched", b"", status=304)
    assert run(mw, stranger)
    assert stranger.meta["simstore"] == "unchanged" and len(store) == 1
    assert stranger.meta["simstore_refetch"] is True  # not stored: fetched whole next time
    skipped = html(url, b"", status=304, meta={"dont_simstore": True})
    assert run(mw, skipped) and "simstore" not in skipped.meta
    assert stats(crawler) == {"simstore/new": 1, "simstore/unchanged": 2,
                              "simstore/skipped": 1, "simstore/skipped/dont_simstore": 1}


def test_a_group_with_304s_gets_the_verdicts_of_its_pages_checked_alone(site, tmp_path):
    """Gate.check_many with None texts (answers 304) among pages: each page's verdict is
    the one a group of the pages alone gets (a second store is the oracle), each None is
    unchanged and only renews what is stored; one not stored is to be fetched whole."""
    from simstore.scrapy import Gate

    gate, oracle = Gate(tmp_path / "a"), Gate(tmp_path / "b")
    paths = ["/article/0", "/article/1", "/article/0/print", "/article/2"]
    texts = [page_text(page(site, p)) for p in paths]
    urls = ["http://127.0.0.1" + p for p in paths]
    gate.check_many(urls[:1], texts[:1])
    gate.store.touch(urls[0], at=1000.0)
    got = gate.check_many([urls[0], urls[1], "http://x/none", urls[2], urls[3]],
                          [None, texts[1], None, texts[2], texts[3]])
    oracle.check_many(urls[:1], texts[:1])
    expected = oracle.check_many(urls[1:], texts[1:])
    assert [got[1], got[3], got[4]] == expected
    assert [(v.status, v.kept, v.refetch) for v in (got[0], got[2])] == [
        ("unchanged", urls[0], False), ("unchanged", None, True)]
    assert gate.store.stored_at(urls[0]) > 1000.0
    assert "http://x/none" not in gate.store and len(gate.store) == len(oracle.store)


def test_expired_pages_no_longer_count(site, tmp_path):
    """With SIMSTORE_EXPIRE, a copy of a page stored longer ago passes and is stored; a
    copy of a fresh one is dropped."""
    mw, crawler = middleware(tmp_path, SIMSTORE_EXPIRE="30d")
    store = mw.gate.store
    assert run(mw, page(site, "/article/3"))
    store.touch("http://127.0.0.1/article/3", at=1000.0)
    fresh = page(site, "/article/3/print")
    assert run(mw, fresh)
    assert not run(mw, html("http://127.0.0.1/mirror/3", fresh.body))
    assert stats(crawler) == {"simstore/new": 2, "simstore/near_duplicate": 1}
    assert run(mw, page(site, "/article/4"))
    store.touch("http://127.0.0.1/article/4", at=1000.0)
    assert run(mw, page(site, "/article/4"))  # its own expired version: unchanged, renewed
    assert store.stored_at("http://127.0.0.1/article/4") > 1000.0
    assert stats(crawler)["simstore/unchanged"] == 1


def test_log_mode_counts_but_drops_nothing(site, tmp_path):
    """SIMSTORE_MODE = "log": near-duplicates are counted, never dropped or stored."""
    mw, crawler = middleware(tmp_path, SIMSTORE_MODE="log")
    assert run(mw, page(site, "/article/3"))
    assert run(mw, page(site, "/article/3/print"))
    assert stats(crawler) == {"simstore/new": 1, "simstore/near_duplicate": 1}
    assert len(mw.gate.store) == 1


# --------------------------------------------------------------------------- the pipeline


def test_pipeline_drops_items_with_near_duplicate_text(site, tmp_path):
    """Items are checked on SIMSTORE_FIELD: a copy raises DropItem naming the kept url, an
    item unchanged under its id is dropped, a changed one passes; items without text are
    passed on and counted."""
    crawler = get_crawler(settings_dict={"SIMSTORE_PATH": str(tmp_path / "s"),
                                         "SIMSTORE_FIELD": "body"})
    pipe = NearDuplicatePipeline.from_crawler(crawler)
    text = " ".join(site.items[0].paras)
    first = {"url": "http://x/1", "body": text}
    assert pipe.process_item(first) is first
    with pytest.raises(DropItem, match="http://x/1"):
        pipe.process_item({"url": "http://x/2", "body": "Updated. " + text})
    # no url: stored under a digest of the text, so the same text again is unchanged
    with pytest.raises(DropItem, match="unchanged"):
        pipe.process_item({"body": " ".join(site.items[1].paras)}) and None
        pipe.process_item({"body": " ".join(site.items[1].paras)})
    assert pipe.process_item({"url": "http://x/3", "body": None})["url"] == "http://x/3"
    with pytest.raises(DropItem, match="unchanged"):  # a recrawl's item: passed on before
        pipe.process_item(dict(first))
    changed = {"url": "http://x/1", "body": " ".join(site.items[2].paras)}
    assert pipe.process_item(changed) is changed
    assert stats(crawler) == {"simstore/new": 2, "simstore/near_duplicate": 1,
                              "simstore/unchanged": 2, "simstore/changed": 1,
                              "simstore/skipped": 1, "simstore/skipped/no_text": 1}


def test_middleware_and_pipeline_in_one_process_share_one_handle(tmp_path):
    """Components of one process naming one store path share one handle (LMDB opens an
    environment once per process); it closes when the last of them lets go."""
    mw, _ = middleware(tmp_path)
    pipe = NearDuplicatePipeline.from_crawler(
        get_crawler(settings_dict={"SIMSTORE_PATH": str(tmp_path / "store")}))
    assert pipe.gate.store is mw.gate.store
    mw.gate.close()
    assert len(pipe.gate.store) == 0  # still open for the pipeline
    pipe.gate.close()
    with pytest.raises(simstore.StoreClosedError):
        len(mw.gate.store)


# --------------------------------------------------------------------------- packaging


def test_import_simstore_does_not_import_scrapy():
    """``import simstore`` (and its CLI) leaves Scrapy unimported; simstore.scrapy imports it."""
    code = ("import sys, simstore, simstore.cli; assert 'scrapy' not in sys.modules; "
            "import simstore.scrapy; assert 'scrapy' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
