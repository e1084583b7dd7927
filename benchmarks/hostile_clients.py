"""Hostile-but-honest clients for ``benchmarks/bench_serve.py --hostile`` (issue 30): they run beside
the normal load until its end, each kind in a loop, and count what the server answered.  The
benchmark runs them in a process of their own (as other machines would be: they do not share the
server's interpreter lock).

* ``idle``: connections (HTTP and Wyoming alternately) that send nothing; reopened when the
  server closes them (header / idle timeouts) or refuses them (the connection cap).
* ``slow_reader``: asks for speech (HTTP ``/v1/audio/speech`` and Wyoming ``synthesize``) with a
  4 KB receive buffer and never reads; closes after ``hold_s`` and asks again.
* ``oversized``: declarations the server must refuse before doing the work -- an HTTP upload
  declaring 1 GB (413), a Wyoming ``audio-chunk`` declaring rate 1 (the resampler's 16,000x), a
  Wyoming event header declaring a 1 GB payload (closed), an HTTP head sent a byte a second
  (slow headers: 408 / closed by ``--header-timeout``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import Counter

#: words of speech a slow reader asks for (the benchmark's synthetic engine works 20 ms per word):
#: with 20, the two slow readers' own requests were a third of the speech engine's work and the
#: normal speech clients' p95 rose 2.3x from queueing behind them, not from their not reading
WORDS = 5


async def _open(host: str, port: int, rcvbuf: int | None = None):
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    return await asyncio.open_connection(sock=sock)


def _event(kind: str, data: dict, payload: bytes = b"") -> bytes:
    body = json.dumps(data).encode()
    head = {"type": kind, "data_length": len(body)}
    if payload:
        head["payload_length"] = len(payload)
    return json.dumps(head).encode() + b"\n" + body + payload


async def idle(http, wyoming, until: float, counts: Counter, n: int) -> None:
    async def one(i: int):
        host, port = (http if i % 2 else wyoming)
        while time.monotonic() < until:
            try:
                reader, writer = await _open(host, port)
                data = await asyncio.wait_for(reader.read(), max(0.1, until - time.monotonic()))
                counts["idle refused" if data else "idle closed"] += 1
                writer.close()
            except (asyncio.TimeoutError, OSError):
                counts["idle held to the end"] += 1
            await asyncio.sleep(0.05)

    await asyncio.gather(*(one(i) for i in range(n)))


async def slow_reader(http, wyoming, key: str, until: float, counts: Counter, n: int, hold_s: float = 5.0) -> None:
    async def one(i: int):
        while time.monotonic() < until:
            try:
                if i % 2:
                    reader, writer = await _open(*http, rcvbuf=4096)
                    body = json.dumps({"model": "tts", "voice": "default", "input": "stall " * WORDS}).encode()
                    writer.write(f"POST /v1/audio/speech HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
                                 f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                                 + body)
                else:
                    reader, writer = await _open(*wyoming, rcvbuf=4096)
                    writer.write(_event("synthesize", {"text": "stall " * WORDS}))
                await writer.drain()
                await asyncio.sleep(min(hold_s, max(0.0, until - time.monotonic())))
                counts["slow reader"] += 1
                writer.transport.abort()
            except OSError:
                counts["slow reader refused"] += 1
                await asyncio.sleep(0.2)

    await asyncio.gather(*(one(i) for i in range(n)))


async def oversized(http, wyoming, key: str, until: float, counts: Counter) -> None:
    async def answer(target, data: bytes, what: str, pace_s: float = 0.0):
        try:
            reader, writer = await _open(*target)
            if pace_s:
                for b in data:
                    writer.write(bytes([b]))
                    await writer.drain()
                    await asyncio.sleep(pace_s)
            else:
                writer.write(data)
                await writer.drain()
            reply = await asyncio.wait_for(reader.read(200), 30)
            counts[f"{what}: {reply[:12].decode(errors='replace') or 'closed'}"] += 1
            writer.close()
        except (asyncio.TimeoutError, OSError) as exc:  # a reset: the server closed while it was sending
            counts[f"{what}: {type(exc).__name__}"] += 1

    huge = (b"POST /v1/audio/transcriptions HTTP/1.1\r\nhost: x\r\ncontent-type: multipart/form-data; boundary=x\r\n"
            b"authorization: Bearer " + key.encode() + b"\r\ncontent-length: 1073741824\r\n\r\n" + b"\0" * 65536)
    rate1 = (_event("audio-start", {"rate": 16000, "width": 2, "channels": 1})
             + _event("audio-chunk", {"rate": 1, "width": 2, "channels": 1}, b"\0" * 80_000))
    header = b'{"type": "audio-chunk", "data_length": 1073741824}\n' + b"{" * 4096
    slow_head = b"GET /health HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * 40 + b"\r\n\r\n"
    async def repeat(*how, **kw):
        while time.monotonic() < until:
            await answer(*how, **kw)
            await asyncio.sleep(0.1)

    await asyncio.gather(repeat(http, huge, "1 GB upload"), repeat(wyoming, rate1, "rate-1 chunk"),
                         repeat(wyoming, header, "1 GB event"), repeat(http, slow_head, "slow head", pace_s=0.5))


async def run_all(http: str, wyoming: str, key: str, until: float, *, idle_n: int = 200,
                  slow_n: int = 2) -> Counter:
    """Every hostile kind until ``until`` (monotonic); the counts of what the server answered."""
    h = http.rsplit(":", 1)
    w = wyoming.removeprefix("tcp://").rsplit(":", 1)
    h, w = (h[0], int(h[1])), (w[0], int(w[1]))
    counts: Counter = Counter()
    await asyncio.gather(idle(h, w, until, counts, idle_n), slow_reader(h, w, key, until, counts, slow_n),
                         oversized(h, w, key, until, counts))
    return counts


if __name__ == "__main__":  # python hostile_clients.py HTTP_HOST:PORT tcp://WYOMING KEY SECONDS -> JSON counts
    import sys

    http_address, wyoming_address, api_key, seconds = sys.argv[1:5]
    end = time.monotonic() + float(seconds)
    print(json.dumps(dict(asyncio.run(run_all(http_address, wyoming_address, api_key, end)))))
