"""Validate codec tokens before they reach a step graph (numpy only).

Layout: ``[T, Q]`` (tokens x codebooks), the layout of the official ``decode(audio_codes)``
(batch, codes_length, num_quantizers) without the batch.  ``[Q, T]`` is accepted when it is
unambiguous (T != Q); a square ``[Q, Q]`` array is read as ``[T, Q]``.

``-1`` is end padding, as the official decode treats it: the audio length is the number of
tokens whose first codebook is not -1.  We accept -1 only in trailing padding rows (codebook
0 equal to -1 from some token to the end); a -1 anywhere else would be clamped to 0 by the
official code and silently decoded, so it is an error here, naming the position.
"""

from __future__ import annotations

import numpy as np

from rkspeech.core.errors import RkspeechError


def normalize_codes(codes, num_quantizers: int, codebook_size: int, *, allow_empty: bool = True) -> np.ndarray:
    """Return validated ``[T, Q]`` int64 codes with end padding removed."""
    arr = np.asarray(codes)
    if arr.dtype == object or arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and arr.size and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            raise RkspeechError(f"codes must be integers, got dtype {arr.dtype} (cast them with astype(int64) if intended)")
        raise RkspeechError(f"codes must be an integer array, got dtype {arr.dtype}")
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 2:
        raise RkspeechError(f"codes must be [T, {num_quantizers}] (or [{num_quantizers}, T]), got shape {list(arr.shape)}")
    if arr.shape[1] == num_quantizers:
        tq = arr
    elif arr.shape[0] == num_quantizers:
        tq = arr.T
    else:
        raise RkspeechError(
            f"codes of shape {list(arr.shape)} have no axis of {num_quantizers} codebooks; expected [T, {num_quantizers}]"
        )
    if tq.dtype.kind == "u":
        # range-checked before the cast: uint64 2**64-1 cast to int64 is -1, end padding, and was
        # silently dropped (issue 37); an unsigned array has no padding, every code must be in range
        _refuse_out_of_range(tq, codebook_size)
    tq = tq.astype(np.int64, copy=False)
    if tq.shape[0] == 0:
        if not allow_empty:
            raise RkspeechError("no codes")
        return np.zeros((0, num_quantizers), dtype=np.int64)
    # trailing end padding: codebook 0 == -1 from some row to the end
    real = tq[:, 0] != -1
    length = int(np.nonzero(real)[0][-1]) + 1 if real.any() else 0
    if length == 0 and not allow_empty:
        raise RkspeechError("no codes (every token is -1 end padding)")
    body = tq[:length]
    _refuse_out_of_range(body, codebook_size)
    return np.ascontiguousarray(body)


def _refuse_out_of_range(tq: np.ndarray, codebook_size: int) -> None:
    """One line naming the first code of ``[T, Q]`` ``tq`` (any integer dtype) outside
    ``[0, codebook_size)``."""
    bad = np.argwhere((tq >= codebook_size) if tq.dtype.kind == "u" else ((tq < 0) | (tq >= codebook_size)))
    if bad.size:
        t, q = (int(x) for x in bad[0])
        value = int(tq[t, q])
        if value == -1:
            raise RkspeechError(
                f"code -1 at token {t}, codebook {q}: -1 is only valid as end padding "
                f"(codebook 0 = -1 on every token from some point to the end)"
            )
        raise RkspeechError(f"code {value} at token {t}, codebook {q} is outside [0, {codebook_size})")


def utterances(codes, num_quantizers: int, codebook_size: int) -> list[np.ndarray]:
    """The utterances of a codes array, each validated ``[T, Q]`` int64 (:func:`normalize_codes`):
    ``[N, T, Q]`` (or ``[N, Q, T]``) with N > 1 is N utterances, each padded at its end with -1
    rows (the official batched ``decode(audio_codes)`` layout; what ``speak --codes-out`` writes
    for a text of several sentences, :func:`utterance_array`); anything else is one utterance.
    Each utterance starts from a fresh vocoder state, as ``speak`` spoke it (issue 37: decoding the
    sentences' codes as one stream differed from speak's wav by up to 16,102 LSB)."""
    arr = np.asarray(codes)
    if arr.ndim == 3 and arr.shape[0] > 1:
        out = []
        for i in range(arr.shape[0]):
            try:
                out.append(normalize_codes(arr[i], num_quantizers, codebook_size, allow_empty=False))
            except RkspeechError as exc:
                raise RkspeechError(f"utterance {i} of {arr.shape[0]}: {exc}") from None
        return out
    return [normalize_codes(arr, num_quantizers, codebook_size, allow_empty=False)]


def utterance_array(parts: list[np.ndarray], *, fill=-1, dtype=np.int64) -> np.ndarray:
    """``[T, Q]`` for one utterance, else ``[N, max T, Q]`` with each utterance padded by ``fill``
    rows at its end (codes: -1, the layout :func:`utterances` reads back as the same utterances;
    margins: NaN)."""
    parts = [np.asarray(p, dtype=dtype) for p in parts]
    if len(parts) == 1:
        return parts[0]
    q = parts[0].shape[1]
    out = np.full((len(parts), max(len(p) for p in parts), q), fill, dtype=dtype)
    for i, p in enumerate(parts):
        out[i, :len(p)] = p
    return out


def margin_rows(rows: list[list[float]], groups: int) -> np.ndarray:
    """``float32 [steps, groups]`` of one generation's decision margins (``loop.FrameSampler``'s
    rows: a frame's codebooks, then the decision that ended it, codebook 0 only), NaN where a
    decision has none (the last row's codebooks; a graph that chooses its own codes)."""
    out = np.full((len(rows), groups), np.nan, dtype=np.float32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row[:groups]
    return out


def load_codes_file(path) -> np.ndarray:
    """Read codes from ``.npy``, ``.json`` (nested lists) or ``.pt`` (a tensor, weights-only)."""
    import json
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        raise RkspeechError(f"codes file {p} is a directory; pass a .npy, .json or .pt file")
    if not p.is_file():
        raise RkspeechError(f"codes file {p} does not exist")
    suffix = p.suffix.lower()
    try:
        if suffix == ".npy":
            return np.load(p, allow_pickle=False)
        if suffix == ".json":
            data = json.loads(p.read_text())
            if isinstance(data, dict):
                data = data.get("codes", data.get("audio_codes"))
            arr = np.asarray(data)
            if arr.dtype == object:
                raise RkspeechError(f"{p}: codes are ragged (rows of different lengths)")
            if arr.dtype.kind == "f":  # numpy reads whole numbers beyond int64 as floats
                flat = np.asarray(data, dtype=object).reshape(-1)
                big = next((x for x in flat if type(x) is int and not -2**63 <= x < 2**63), None)
                if big is not None:
                    raise RkspeechError(f"{p}: code {big} is outside [0, 2**63) (not a codebook index)")
            return arr
        if suffix in (".pt", ".pth"):
            import torch

            obj = torch.load(p, map_location="cpu", weights_only=True)
            if isinstance(obj, dict):
                obj = obj.get("codes", obj.get("audio_codes"))
            if not isinstance(obj, torch.Tensor):
                raise RkspeechError(f"{p}: expected a tensor of codes (or a dict with 'codes')")
            return obj.numpy()
    except RkspeechError:
        raise
    except Exception as exc:  # corrupt files: numpy/json/torch raise many types
        raise RkspeechError(f"{p}: cannot read codes ({type(exc).__name__}: {exc})") from None
    raise RkspeechError(f"{p}: unsupported codes file type {suffix!r}; use .npy, .json or .pt")
