"""Both front ends over one :class:`~rkspeech.serve.engines.ServePool`, in one asyncio loop.

``server = Server(pool, options)``; ``await server.start()`` binds what ``options`` asks for
(``server.addresses`` says where, ports 0 resolved); ``await server.stop()`` shuts down
gracefully: the listeners close, the pool refuses queued and new requests, running requests
finish (up to ``options.shutdown_grace_s``), then connections close and owned models are
released.  :func:`serve_forever` runs that until SIGTERM, SIGHUP or SIGINT (the CLI);
:class:`ServerThread` runs it in a background thread (tests, benchmarks).
"""

from __future__ import annotations

import asyncio
import threading

from rkspeech.serve.engines import SPEECH, ServePool
from rkspeech.serve.options import ServeOptions


class Server:
    def __init__(self, pool: ServePool, options: ServeOptions, *, metrics=None):
        if metrics is None:
            from rkspeech.serve.metrics import Metrics

            metrics = Metrics()
        pool.metrics = metrics
        for lane in pool.lanes.values():
            lane.metrics = metrics
        if pool.has(SPEECH):
            metrics.watch_batch(pool.first_model(SPEECH))
        self.pool, self.options, self.metrics = pool, options, metrics
        from rkspeech.serve.limits import ServerLimits

        self.limits = ServerLimits.from_options(options, metrics)  # one cap and one budget for both front ends
        self.wyoming = self.http = self.announcement = None
        self.addresses: dict[str, str] = {}

    async def start(self) -> None:
        from rkspeech.core.errors import RkspeechError

        if self.options.wyoming is None and self.options.http is None:
            raise RkspeechError("nothing to serve on: give --wyoming URI and/or --http HOST:PORT")
        from rkspeech.serve.limits import quiet_accept_errors

        quiet_accept_errors(asyncio.get_running_loop())
        try:
            if self.options.wyoming is not None:
                from rkspeech.serve.wyoming_listener import WyomingServer

                self.wyoming = WyomingServer(self.options.wyoming, self.pool, self.options, self.metrics,
                                             self.limits)
                await self.wyoming.start()
                self.addresses["wyoming"] = self.wyoming.address
                if self.options.zeroconf is not None:
                    await self._announce()
            if self.options.http is not None:
                from rkspeech.serve.http_server import HttpServer

                self.http = HttpServer(self.options.http, self.pool, self.options, self.metrics, self.limits)
                await self.http.start()
                self.addresses["http"] = self.http.address
        except OSError as exc:
            await self.stop()
            raise RkspeechError(f"cannot listen: {exc.strerror or exc}") from None
        except RkspeechError:  # --zeroconf could not announce: nothing is left listening
            await self.stop()
            raise

    async def _announce(self) -> None:
        """Zeroconf for the Wyoming listener (serve.discovery), once it is bound (port 0 resolved)."""
        from rkspeech.serve.discovery import SERVICE_TYPE, Announcement

        host, port = self.wyoming.address.removeprefix("tcp://").rsplit(":", 1)
        self.announcement = Announcement(self.options.zeroconf, host.strip("[]"), int(port))
        await self.announcement.start()
        name = self.announcement.name.removesuffix("." + SERVICE_TYPE)
        self.addresses["zeroconf"] = f"{name!r} ({SERVICE_TYPE} -> {self.announcement.address}:{port})"

    async def stop(self) -> bool:
        """Graceful shutdown; True when every running request finished in time."""
        grace = self.options.shutdown_grace_s
        if self.announcement is not None:
            await self.announcement.stop()  # the goodbye first: no client is sent to a closing server
        if self.wyoming is not None:
            await self.wyoming.stop_listening()
        stop_http = asyncio.create_task(self.http.stop()) if self.http is not None else None
        finished = await self.pool.shutdown(grace)
        if self.wyoming is not None:
            await self.wyoming.stop(grace_s=1.0)
        if stop_http is not None:
            await stop_http
        from rkspeech.serve.limits import flush_all

        flush_all()  # refusals counted since the last log line
        return finished


async def serve_forever(server: Server, *, on_ready=None) -> bool:
    """Start, call ``on_ready(addresses)``, run until a signal of ``core.child.ENDING_SIGNALS``
    (SIGTERM, SIGHUP, SIGINT: one handler for all), shut down gracefully."""
    import signal

    from rkspeech.core.child import ENDING_SIGNALS

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = {}
    for sig in ENDING_SIGNALS:
        try:
            previous = signal.getsignal(sig)
            loop.add_signal_handler(sig, stop.set)
            installed[sig] = previous
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        await server.start()
        if on_ready is not None:
            on_ready(server.addresses)
        await stop.wait()
        return await server.stop()  # a second signal during the grace time changes nothing
    finally:
        for sig, previous in installed.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)  # the CLI's, not the default


class ServerThread:
    """A :class:`Server` in a background thread with its own loop: ``with ServerThread(pool,
    options) as st: st.addresses``; ``st.call(coro_fn)`` runs a coroutine in the server's loop."""

    def __init__(self, pool: ServePool, options: ServeOptions):
        self.pool, self.options = pool, options
        self.loop = asyncio.new_event_loop()
        self.server = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="rkspeech-serve", daemon=True)

    def start(self) -> ServerThread:
        self._thread.start()

        async def make():
            self.server = Server(self.pool, self.options)
            await self.server.start()

        self.call(make)
        return self

    @property
    def addresses(self) -> dict:
        return self.server.addresses

    def call(self, coro_fn, *args, timeout: float | None = 120):
        return asyncio.run_coroutine_threadsafe(coro_fn(*args), self.loop).result(timeout)

    def submit(self, coro_fn, *args):
        """Schedule without waiting (a concurrent.futures.Future)."""
        return asyncio.run_coroutine_threadsafe(coro_fn(*args), self.loop)

    def stop(self) -> bool:
        finished = True
        if self.server is not None:
            finished = self.call(self.server.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        return finished

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
