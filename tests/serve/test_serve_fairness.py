"""The wait line is shared fairly between clients (rkspeech.serve.lane), checked on the pool alone
with a fake engine whose every request takes SERVICE_S: a client that keeps several requests
waiting and re-queues as fast as it can delays another client's request by at most the request
already running, and cannot keep it out of a full line."""

from __future__ import annotations

import asyncio
import time

import pytest

SERVICE_S = 0.15


def _work(model, tag):
    time.sleep(SERVICE_S)
    return tag


async def _greedy(pool, kind, stop: asyncio.Event, served: list):
    """One of the greedy client's parallel requests, re-queued the moment it is answered."""
    from rkspeech.serve.errors import Busy

    while not stop.is_set():
        try:
            served.append(await pool.run(kind, _work, "A", client="A"))
        except Busy:
            await asyncio.sleep(0)


def test_a_greedy_client_delays_another_by_at_most_one_service_time():
    from rkspeech.serve.engines import TRANSCRIBE, ServePool

    async def go():
        pool = ServePool(transcribers=["m0"], max_queue=3, request_timeout_s=60, owned=False)
        stop, served = asyncio.Event(), []
        greedy = [asyncio.create_task(_greedy(pool, TRANSCRIBE, stop, served)) for _ in range(3)]
        await asyncio.sleep(2.5 * SERVICE_S)  # A has one running and two waiting, re-queued at once
        assert pool.status()[TRANSCRIBE]["waiting"] == 2
        waits = []
        for _ in range(3):  # B: one request at a time, each after a pause
            start = time.monotonic()
            assert await pool.run(TRANSCRIBE, _work, "B", client="B") == "B"
            waits.append(time.monotonic() - start - SERVICE_S)
            await asyncio.sleep(0.3 * SERVICE_S)
        stop.set()
        await asyncio.gather(*greedy)
        await pool.shutdown(5)
        return waits, served

    waits, served = asyncio.run(go())
    # first come, first served would make B wait for A's two waiting requests too (2-3 x SERVICE_S)
    assert max(waits) <= SERVICE_S + 0.05, waits
    assert len(served) >= 3  # A was served meanwhile


def test_a_full_line_makes_room_for_a_client_with_nothing_waiting():
    from rkspeech.serve.engines import TRANSCRIBE, ServePool
    from rkspeech.serve.errors import Busy

    async def go():
        pool = ServePool(transcribers=["m0"], max_queue=3, request_timeout_s=60, owned=False)
        a = [asyncio.create_task(pool.run(TRANSCRIBE, _work, f"A{i}", client="A")) for i in range(4)]
        await asyncio.sleep(0.05)  # A: one running, three waiting: the line is full
        pool.check_capacity(TRANSCRIBE, "B")  # room for B ...
        with pytest.raises(Busy):
            pool.check_capacity(TRANSCRIBE, "A")  # ... not for more of A
        b = asyncio.create_task(pool.run(TRANSCRIBE, _work, "B", client="B"))
        done = await asyncio.gather(*a, b, return_exceptions=True)
        await pool.shutdown(5)
        return done

    done = asyncio.run(go())
    assert isinstance(done[3], Busy) and "retry later" in str(done[3])  # A's newest gave its place
    assert done[:3] == ["A0", "A1", "A2"] and done[4] == "B"
