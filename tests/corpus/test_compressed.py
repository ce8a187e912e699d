"""simstore.corpus.compressed: .gz inflated ahead on a thread, compression written behind."""

from __future__ import annotations

import functools
import gzip
import io
import random
import zlib

import pytest

from simstore.corpus.compressed import (
    _BLOCK,
    _PIECE,
    DEFLATE,
    GzipReadAhead,
    GzipWriter,
    WriteBehind,
)

# zlib and, when installed, ISA-L's (what DEFLATE is then): each reads and writes the same
CODECS = [zlib] + ([DEFLATE] if DEFLATE is not zlib else [])
codecs = pytest.mark.parametrize("codec", CODECS, ids=lambda m: m.__name__)


@functools.cache  # bytes, made once per size: the tests share them
def _lines(n: int, seed: int = 3) -> bytes:
    rng = random.Random(seed)
    return b"".join(b'{"id": %d, "text": "%s"}\n' % (i, " ".join(
        f"w{rng.randrange(5000)}" for _ in range(rng.randrange(5, 60))).encode())
        for i in range(n))


@functools.cache  # compressed once for every codec's test (~1 s)
def _flat() -> tuple[bytes, bytes]:
    """40 MB of one byte, then _lines(20_000); and that gzipped at level 9."""
    flat = b"x" * (40 << 20) + b"\n" + _lines(20_000)
    return flat, gzip.compress(flat, 9)


def _read_lines(data: bytes, codec=zlib) -> tuple[list[bytes], BaseException | None]:
    """The lines read through GzipReadAhead before it ended or raised (and what it raised)."""
    got: list[bytes] = []
    with io.BufferedReader(GzipReadAhead(io.BytesIO(data), codec), 1 << 20) as fh:
        try:
            for line in fh:
                got.append(line)
        except (EOFError, zlib.error) as exc:
            return got, exc
    return got, None


@codecs
def test_read_ahead_gives_every_member_s_lines(codec):
    """Two members with zero padding after each (as gzip allows), an empty file, and a
    file of 40 MB of one byte (inflate steps capped at 1 MB): the bytes gzip gives."""
    a, b = _lines(20_000), _lines(7_000, seed=4)
    data = gzip.compress(a) + b"\0" * 10 + gzip.compress(b, 1) + b"\0" * 3
    assert gzip.decompress(data) == a + b
    got, err = _read_lines(data, codec)
    assert err is None and b"".join(got) == a + b and len(got) == 27_000
    assert _read_lines(b"", codec) == ([], None)
    flat, packed = _flat()
    got, err = _read_lines(packed, codec)
    assert err is None and b"".join(got) == flat and len(got[0]) > 10 * _BLOCK


@codecs
def test_read_ahead_raises_at_the_fault_after_the_bytes_before_it(codec):
    """Truncated: EOFError after a prefix of the lines that reaches within one piece
    (64 KB compressed) of the cut; a flipped byte: zlib.error, the start read first."""
    content = _lines(60_000)
    data = gzip.compress(content, 6)
    cut = data[: len(data) * 6 // 10]
    got, err = _read_lines(cut, codec)
    assert isinstance(err, EOFError)
    read = b"".join(got)
    assert content.startswith(read)
    inflated = zlib.decompressobj(31).decompress(cut[: len(cut) - _PIECE])
    assert len(read) >= len(inflated) - (1 << 12)  # all but the last piece and a line
    bad = bytearray(data)
    bad[len(data) // 2] ^= 0xFF
    got, err = _read_lines(bytes(bad), codec)  # garbage may come out before the check fails,
    assert isinstance(err, zlib.error)  # as with gzip's own reader: the error still comes
    assert content.startswith(b"".join(got[:1000]))


def test_read_ahead_stops_its_thread_when_closed_early():
    """Closed after one line of a large file (42 MB inflated, its lines ten times over: the
    thread holds 8 blocks of 1 MB at most): the thread ends (it was blocked handing over)."""
    raw = GzipReadAhead(io.BytesIO(gzip.compress(_lines(20_000) * 10, 1)))
    with io.BufferedReader(raw, 1 << 16) as fh:
        assert fh.readline().startswith(b'{"id": 0,')
    assert not raw.thread.is_alive()


def test_write_behind_writes_what_it_is_given_in_order():
    """Small and large writes through WriteBehind(GzipFile) decompress to their concatenation;
    the stream is closed by close(), once."""
    sink = io.BytesIO()
    sink.close = lambda: None  # keep its bytes readable after GzipFile closes it
    parts = [_lines(n, seed=n) for n in (1, 5000, 3, 40_000, 0, 2)]
    w = WriteBehind(gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=1))
    for p in parts:
        assert w.write(p) == len(p)
    w.close()
    w.close()
    assert w.stream.closed and gzip.decompress(sink.getvalue()) == b"".join(parts)


class _Full(io.RawIOBase):
    """A stream that takes 3 MB, then fails as a full disk does."""

    def __init__(self) -> None:
        self.n = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.n += len(b)
        if self.n > 3 << 20:
            raise OSError(28, "No space left on device")
        return len(b)


def test_write_behind_raises_the_thread_s_error_in_the_caller():
    """A write failing on the thread is raised by a later write or by close()."""
    w = WriteBehind(_Full())
    with pytest.raises(OSError, match="No space left"):
        for _ in range(100):
            w.write(b"y" * (512 << 10))
        w.close()
    w = WriteBehind(_Full())
    w.write(b"z" * (5 << 20))
    with pytest.raises(OSError, match="No space left"):
        w.close()


@codecs
def test_gzip_writer_makes_one_member_gzip_reads(codec):
    """GzipWriter: what gzip decompresses to the bytes written, the same bytes for the same
    writes (no name, time 0), the stream left open."""
    parts = [_lines(n, seed=n) for n in (3, 20_000, 0, 7)]

    def write() -> bytes:
        sink = io.BytesIO()
        w = GzipWriter(sink, 1, codec)
        for p in parts:
            assert w.write(p) == len(p)
        w.close()
        w.close()
        assert not sink.closed
        return sink.getvalue()

    data = write()
    assert gzip.decompress(data) == b"".join(parts) and write() == data
