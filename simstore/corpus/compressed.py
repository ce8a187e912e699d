"""Compressed JSON lines near the speed of plain ones: (de)compression on a helper thread.

The compressors release the GIL while they work, so on a second core the
compression of an output (:class:`WriteBehind`) and the inflating of a ``.gz``
input (:class:`GzipReadAhead`) run beside parsing and fingerprinting instead of
between them. The bytes read and written are the same as without the thread; an
error on the thread is raised in the caller where it would have been met. gzip is
deflated and inflated by :data:`DEFLATE`: ISA-L's when installed, else zlib.
"""

from __future__ import annotations

import io
import queue
import threading
import zlib
from types import ModuleType
from typing import IO, Any

try:  # ISA-L (a dependency): at level 1 several times as fast as zlib at the same size
    from isal import isal_zlib as DEFLATE  # (docs/bench/journal.md, "Corpus")
except ImportError:  # pragma: no cover - a platform without an ISA-L build
    DEFLATE = zlib  # type: ignore[misc]  # the same module interface

_PIECE = 64 << 10  # compressed bytes inflated at a time (an error loses at most this)
_BLOCK = 1 << 20  # the most bytes one inflate step makes, whatever the ratio
_DEPTH = 8  # blocks waiting between the thread and its caller, either way
_STOP = object()


class _Worker:
    """A daemon thread and the bounded queue between it and its caller."""

    def __init__(self, name: str) -> None:
        self.q: queue.Queue[Any] = queue.Queue(_DEPTH)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _main(self) -> None:
        raise NotImplementedError

    def put(self, item: Any) -> bool:
        """Hand an item over; False once the other side has stopped listening."""
        while not self.stopping.is_set():
            try:
                self.q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False


class GzipReadAhead(io.RawIOBase, _Worker):
    """A ``.gz`` file's content (all its members), inflated on a helper thread ahead of
    the reader; wrap it in ``io.BufferedReader`` to read lines. A truncated file raises
    EOFError and corrupt data zlib.error, after every byte before the fault."""

    def __init__(self, raw: IO[bytes], codec: ModuleType = DEFLATE) -> None:
        io.RawIOBase.__init__(self)
        _Worker.__init__(self, "simstore-gunzip")
        self._raw = raw
        self._codec = codec
        self._block = memoryview(b"")
        self._done = False
        self.thread.start()

    def readable(self) -> bool:
        return True

    def _main(self) -> None:
        try:
            self._inflate()
        except self._codec.error as exc:  # ISA-L's own class: zlib's, as gzip raises
            self.put(zlib.error(str(exc)))
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
            self.put(exc)
        else:
            self.put(_STOP)

    def _inflate(self) -> None:
        d = None
        while not self.stopping.is_set():
            data = self._raw.read(_PIECE)
            if not data:
                break
            while True:
                if d is None:
                    data = data.lstrip(b"\0")  # zero padding after a member, as gzip allows
                    if not data:
                        break
                    d = self._codec.decompressobj(31)
                out = d.decompress(data, _BLOCK)
                if out and not self.put(out):
                    return
                if d.eof:
                    data, d = d.unused_data, None
                    if not data:
                        break
                else:
                    data = d.unconsumed_tail
                    if not data and len(out) < _BLOCK:  # a full block: more may be held
                        break
        if d is not None:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")

    def readinto(self, buf: Any) -> int:
        while not self._block:
            if self._done:
                return 0
            item = self.q.get()
            if item is _STOP:
                self._done = True
                return 0
            if isinstance(item, BaseException):
                self._done = True
                raise item
            self._block = memoryview(item)
        n = min(len(buf), len(self._block))
        buf[:n] = self._block[:n]
        self._block = self._block[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            self.stopping.set()
            self.thread.join()
        super().close()


class WriteBehind(_Worker):
    """Writes to a (compressing) binary stream done on a helper thread, in pieces of
    about 1 MB; :meth:`close` waits for them, closes the stream, and raises what failed."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__("simstore-compress")
        self.stream = stream
        self._pending: list[bytes] = []
        self._size = 0
        self._error: BaseException | None = None
        self._closed = False
        self.thread.start()

    def _main(self) -> None:
        while True:
            item = self.q.get()
            if item is _STOP:
                return
            if self._error is None:
                try:
                    self.stream.write(item)
                except BaseException as exc:  # noqa: BLE001 - raised by the caller's next call
                    self._error = exc

    def write(self, data: bytes) -> int:
        if self._error is not None:
            raise self._error
        self._pending.append(data)
        self._size += len(data)
        if self._size >= _BLOCK:
            self._hand_over()
        return len(data)

    def _hand_over(self) -> None:
        if self._pending:
            p = self._pending
            self.put(p[0] if len(p) == 1 else b"".join(p))
            self._pending, self._size = [], 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._hand_over()
            self.put(_STOP)
            self.thread.join()
        finally:
            self.stopping.set()
        try:
            self.stream.close()
        except BaseException:
            if self._error is None:
                raise
        if self._error is not None:
            raise self._error


class GzipWriter:
    """One gzip member (no file name, time 0: the same bytes for the same input) written
    to a binary stream at ``level``; :meth:`close` ends the member, the stream stays open."""

    def __init__(self, raw: IO[bytes], level: int, codec: ModuleType = DEFLATE) -> None:
        self.raw = raw
        self._c: Any = codec.compressobj(level, codec.DEFLATED, 31)

    def write(self, data: bytes) -> int:
        out = self._c.compress(data)
        if out:
            self.raw.write(out)
        return len(data)

    def close(self) -> None:
        if self._c is not None:
            self.raw.write(self._c.flush())
            self._c = None
