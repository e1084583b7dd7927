"""``rkspeech serve --zeroconf [NAME]`` (issue 41, item 1): a zeroconf browser on this machine (a
second python-zeroconf instance, on loopback, where the test server listens) finds the service
Home Assistant browses for, resolves it to the listener's address and port, and sees it
withdrawn when the server stops.  Stand-in engines (test_serve_limits): a few seconds."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

pytest.importorskip("wyoming")
pytest.importorskip("uvicorn")
pytest.importorskip("zeroconf")

from test_serve_limits import _server  # noqa: E402 - after the importorskips

SERVICE = "_wyoming._tcp.local."


async def _browse(name: str, *, seconds: float, gone: bool = False):
    """(found, info) as a browser on 127.0.0.1 sees ``name``; with ``gone``, wait for its removal."""
    from zeroconf import IPVersion
    from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

    zc = AsyncZeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)
    seen, removed = asyncio.Event(), asyncio.Event()

    class Listener:
        def add_service(self, _zc, _type, found):
            if found == name:
                seen.set()

        def remove_service(self, _zc, _type, found):
            if found == name:
                removed.set()

        def update_service(self, *_):
            pass

    browser = AsyncServiceBrowser(zc.zeroconf, SERVICE, listener=Listener())
    try:
        await asyncio.wait_for((removed if gone else seen).wait(), seconds)
        info = None
        if not gone:
            info = AsyncServiceInfo(SERVICE, name)
            assert await info.async_request(zc.zeroconf, 3000)
        return True, info
    except asyncio.TimeoutError:
        return False, None
    finally:
        await browser.async_cancel()
        await zc.async_close()


def test_a_browser_on_this_machine_finds_the_service_and_sees_it_go():
    name = f"rkspeech-test-{os.getpid()}"
    st = _server(http=None, zeroconf=name)
    stopped = False
    try:
        port = int(st.addresses["wyoming"].rsplit(":", 1)[1])
        assert st.addresses["zeroconf"] == f"'{name}' ({SERVICE} -> 127.0.0.1:{port})"
        found, info = asyncio.run(_browse(f"{name}.{SERVICE}", seconds=5))
        assert found and info.port == port and info.parsed_addresses() == ["127.0.0.1"]
        # the browser in a second thread: it must still be there when the server stops
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            watch = ex.submit(asyncio.run, _browse(f"{name}.{SERVICE}", seconds=5, gone=True))
            asyncio.run(asyncio.sleep(0.5))  # the watcher is browsing
            st.stop()
            stopped = True
            assert watch.result()[0], "no goodbye: browsers would keep a stopped server"
    finally:
        if not stopped:
            st.stop()


def test_zeroconf_errors_are_one_line(capsys, monkeypatch):
    from rkspeech.cli import main
    from rkspeech.core.errors import RkspeechError
    from rkspeech.serve.options import ServeOptions

    assert main(["serve", "--tts-model-dir", "x", "--wyoming", "unix:///tmp/w.sock", "--zeroconf"]) == 2
    assert capsys.readouterr().err.strip() == \
        "rkspeech serve: error: --zeroconf announces a tcp:// Wyoming listener; --wyoming is unix:///tmp/w.sock"
    with pytest.raises(RkspeechError, match="--wyoming is off"):
        ServeOptions(wyoming=None, zeroconf="x")
    monkeypatch.setitem(sys.modules, "zeroconf", None)  # not installed
    monkeypatch.setitem(sys.modules, "zeroconf.asyncio", None)
    from rkspeech.serve.discovery import Announcement

    with pytest.raises(RkspeechError, match=r"^--zeroconf needs the zeroconf package: pip install zeroconf"):
        asyncio.run(Announcement("x", "127.0.0.1", 1).start())
    with pytest.raises(RkspeechError, match="give a name without dots"):
        Announcement("a.b", "127.0.0.1", 1)
