"""The stage record: the one shape every stage of a ``plan.json`` has, and the upgrade of older plans.

A plan (format ``rkspeech-plan/2``) holds one record per stage it places, under the stage's name
(:data:`STAGES`: ``speaker_encoder``, ``speech_encoder``, ``talker``, ``code_predictor``, ``vocoder``,
``whisper_encoder``), beside
``build`` (what the build recorded) and ``integrity`` (``plan.integrity``)::

    "talker": {"placement": "cpu-int4", "target": null,
               "artifacts": {"prefill": {"onnx": "talker/...int4.onnx"}, "decode": {"onnx": ...}},
               "contract": {...}, "quantization": {...}, "threads": 2}

* ``placement`` is the one word for where a stage runs (``core.placement.PLACEMENTS``: ``npu`` is
  the .rknn on the NPU (the simulator on a host), ``cpu-*`` onnxruntime on the CPU with those weights);
* ``artifacts``: role -> kind -> file, every graph of the stage, kinds :data:`KINDS` (``rknn``: the
  NPU graph; ``onnx``: the ONNX it was converted from, or the graph a CPU stage runs; ``host_onnx``:
  the vocoder's exact host graphs; ``host``: data the host reads, e.g. the Qwen3-ASR decoder's
  token embedding and tokenizer). The code predictor's start graph and quantized heads are roles
  of its record (``start``, ``head1`` ... ``head15``) like its ``step`` graph;
* ``goldens`` (a CPU-placed stage, plans from 2026-12-05 on): role -> the golden replay of that
  role's graph (``runtime.golden``; ``X.onnx`` -> ``X.golden.npz`` beside it), which
  ``rkspeech check-board`` replays; :func:`record_goldens` reads it.  The NPU graphs' goldens
  sit beside their .rknn and are not listed;
* the rest is the stage's own: ``contract``; the vocoder's ``host_contract``, ``codes_length`` and
  ``backends`` (backend -> the kind it runs); a stage's ``quantization``, ``threads``, ``core_mask``;
  the encoder's ``custom_string``.

Format 1 (every plan written before 2026-12-05) kept the vocoder in a ``speech_decoder`` section of
another shape (``impl`` + one map per kind), the code predictor's ``heads`` and ``start`` beside its
artifacts, and said where a stage runs twice (``impl`` and ``placement``).  :func:`upgrade` turns
such a plan into format 2 when it is read (``plan.plan.read_plan``), so every reader sees one shape;
the files it names and their ``integrity`` record are the same in both.  Standard library only.
"""

from __future__ import annotations

from rkspeech.core.errors import RkspeechError

PLAN_FORMAT = "rkspeech-plan/2"
#: plans written before the stage record (``speech_decoder`` + per-stage sections)
FORMAT_1 = "rkspeech-plan/1"
#: every stage a plan may place, in run order (voice cloning's two encoders run once per request,
#: before the talker: ``plan.sections.CLONE_ROLES``)
STAGES = ("speaker_encoder", "speech_encoder", "talker", "code_predictor", "vocoder", "whisper_encoder", "asr_encoder",
          "asr_decoder")
#: the kinds of file a role may name
KINDS = ("rknn", "onnx", "host_onnx", "host")
#: the code predictor's roles beside its step graph: a frame's start graph, and head ``j`` as ``head{j}``
START_ROLE, HEAD_PREFIX = "start", "head"
#: a CPU-placed talker's or step-form code predictor's step graph for several streams at once
#: (``runtime.tts.lanes``; ``pipelines.lane_graphs``): its contract's B is the streams it serves
LANES_ROLE = "lanes"
#: format 1's ``impl`` -> placement (a CPU stage of format 1 without ``placement`` ran fp32 graphs)
_IMPL_PLACEMENT = {"rknn": "npu", "onnx": "cpu-fp32"}
#: format 1's vocoder sections -> kinds
_V1_SECTIONS = {"artifacts": "rknn", "onnx": "onnx", "host_onnx": "host_onnx"}


def head_role(codebook: int) -> str:
    return f"{HEAD_PREFIX}{int(codebook)}"


def head_codebook(role: str) -> int | None:
    """``head3`` -> 3; None for a role that is not a head."""
    tail = role[len(HEAD_PREFIX):] if role.startswith(HEAD_PREFIX) else ""
    return int(tail) if tail.isdigit() and int(tail) >= 1 else None


def is_npu(record: dict) -> bool:
    return isinstance(record, dict) and record.get("placement") == "npu"


def record_placement(record, where: str, allowed: tuple[str, ...]) -> str:
    """The ``placement`` of a stage's ``record`` (``where``: "plan P: talker"), checked against
    ``allowed``: one line for a record that is not an object or a placement it may not have."""
    if not isinstance(record, dict):
        raise RkspeechError(f"{where} must be an object")
    placement = record.get("placement")
    if placement not in allowed:
        raise RkspeechError(f"{where}.placement is {placement!r}, expected one of {', '.join(allowed)}")
    return placement


def file_has_record(path, stage: str) -> bool:
    """Whether the JSON file at ``path`` is a plan holding a ``stage`` record (not, e.g., another
    kind of JSON); False for anything unreadable.  A cheap test before the plan's one reader."""
    import json
    from pathlib import Path

    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(raw, dict) and isinstance(raw.get(stage), dict)


def stage_records(raw: dict) -> dict[str, dict]:
    """stage name -> record, for the stages a format-2 plan holds (in :data:`STAGES` order)."""
    return {n: raw[n] for n in STAGES if isinstance(raw, dict) and isinstance(raw.get(n), dict)}


def record_files(record: dict, kinds=KINDS) -> list[str]:
    """The file names of a record's ``artifacts`` of the given kinds, in order, as written."""
    arts = record.get("artifacts") if isinstance(record, dict) else None
    out = []
    for files in (arts.values() if isinstance(arts, dict) else ()):
        if isinstance(files, dict):
            out += [files[k] for k in kinds if isinstance(files.get(k), str)]
    return out


GOLDENS = "goldens"


def record_goldens(record: dict, where: str) -> dict[str, str] | None:
    """A stage record's ``goldens`` (role -> file name, as written), checked against its
    ``artifacts`` (a golden for a role it has); None when the record lists none (an NPU stage,
    or a plan written before CPU goldens).  One line for a malformed list."""
    g = record.get(GOLDENS) if isinstance(record, dict) else None
    if g is None:
        return None
    arts = record.get("artifacts") if isinstance(record.get("artifacts"), dict) else {}
    if not isinstance(g, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in g.items()):
        raise RkspeechError(f"{where}.{GOLDENS} must map roles to golden files; rebuild the plan")
    extra = sorted(set(g) - set(arts))
    if extra:
        raise RkspeechError(f"{where}.{GOLDENS} names role(s) {extra} the stage's artifacts do not hold; rebuild the plan")
    return dict(g)


def upgrade(raw: dict, where: str) -> dict:
    """``raw`` (a plan's JSON) in format 2: a format-2 plan as it is; a format-1 plan (or one
    without a format) with each section turned into its stage record; another format refused
    in one line."""
    fmt = raw.get("format")
    if fmt == PLAN_FORMAT:
        return raw
    if fmt not in (None, FORMAT_1):
        raise RkspeechError(f"{where}: format {fmt!r} is not one this version reads ({FORMAT_1}, {PLAN_FORMAT}); "
                            "rebuild the plan, or update rkspeech")
    out = {k: v for k, v in raw.items() if k not in ("speech_decoder", *STAGES)}
    out["format"] = PLAN_FORMAT
    sd = raw.get("speech_decoder")
    if sd is not None:
        out["vocoder"] = _vocoder_v1(sd, where)
    for name in ("talker", "code_predictor", "whisper_encoder"):
        if name in raw:
            out[name] = _stage_v1(raw[name], f"{where}: {name}")
    return out


def _placement_v1(sec: dict, where: str) -> object:
    impl = sec.get("impl")
    if impl not in _IMPL_PLACEMENT:
        raise RkspeechError(f"{where}.impl is {impl!r}, expected one of {tuple(_IMPL_PLACEMENT)}")
    placement = sec.get("placement", _IMPL_PLACEMENT[impl])
    if isinstance(placement, str) and (placement == "npu") != (impl == "rknn"):
        raise RkspeechError(f"{where} is placed {placement} but its impl is {impl!r}; rebuild the plan")
    return placement


def _vocoder_v1(sd, where: str):
    """``speech_decoder`` -> the vocoder's record; what is not an object is left for the reader."""
    where = f"{where}: speech_decoder"
    if not isinstance(sd, dict):
        return sd
    rec = {k: v for k, v in sd.items() if k not in ("impl", *_V1_SECTIONS)}
    rec["placement"] = _placement_v1(sd, where)
    arts: dict = {}
    for section, kind in _V1_SECTIONS.items():
        entries = sd.get(section)
        if entries is None:
            continue
        if not isinstance(entries, dict):
            raise RkspeechError(f"{where}.{section} must be an object")
        for role, v in entries.items():
            arts.setdefault(role, {})[kind] = v
    rec["artifacts"] = arts
    backends = sd.get("backends")
    if isinstance(backends, dict):
        rec["backends"] = {b: _V1_SECTIONS.get(s, s) for b, s in backends.items()}
    return rec


def _stage_v1(sec, where: str):
    """A format-1 stage section -> its record: ``placement`` from ``impl``, ``heads`` and
    ``start`` as roles of ``artifacts``."""
    if not isinstance(sec, dict):
        return sec
    rec = {k: v for k, v in sec.items() if k not in ("impl", "heads", "start")}
    rec["placement"] = _placement_v1(sec, where)
    arts = sec.get("artifacts")
    if not isinstance(arts, dict):
        return rec
    arts = dict(arts)
    heads, start = sec.get("heads"), sec.get("start")
    if heads is not None:
        if not isinstance(heads, dict) or not heads or not all(
                isinstance(k, str) and k.isdigit() and int(k) >= 1 and isinstance(v, str) for k, v in heads.items()):
            raise RkspeechError(f"{where}.heads must map codebooks to head graphs; rebuild the plan")
        arts.update({head_role(int(k)): {"onnx": v} for k, v in heads.items()})
    if start is not None:
        if not isinstance(start, str):
            raise RkspeechError(f"{where}.start must name one ONNX graph; rebuild the plan")
        arts[START_ROLE] = {"onnx": start}
    rec["artifacts"] = arts
    return rec
