"""``rkspeech doctor`` on a faked RK3588 without librknnrt.so: the finding says where it comes from
(rknn-toolkit-lite2's wheel does not ship it; issue 40), and the rknn-lite hint says the same."""

from __future__ import annotations

import json

from rkfixtures import fake_rk3588_cpus


def test_missing_librknnrt_names_where_it_comes_from(tmp_path, capsys):
    from rkspeech.cli import main

    root = tmp_path / "board"
    fake_rk3588_cpus(root)
    (root / "proc/device-tree").mkdir(parents=True, exist_ok=True)
    (root / "proc/device-tree/compatible").write_text("radxa,rock-5b\x00rockchip,rk3588\x00")
    main(["doctor", "--json", "--root", str(root)])
    info = json.loads(capsys.readouterr().out)
    f, = [f for f in info["findings"] if f["id"] == "librknnrt-missing"]
    assert "wheel does not ship librknnrt.so" in f["message"]
    assert "rknpu2/runtime/Linux/librknn_api/aarch64/librknnrt.so from airockchip/rknn-toolkit2" in f["message"]
    assert "/usr/lib/" in f["message"] and "#303" in f["source"]


def test_the_rknn_lite_install_hint_says_it_too():
    from rkspeech.convert.toolkit import LIBRKNNRT_FROM, LITE_HINT

    assert LIBRKNNRT_FROM in LITE_HINT and "airockchip/rknn-toolkit2" in LITE_HINT
