"""``rkspeech build qwen3-asr``: a Qwen3-ASR root -> one plan (encoder windows on the NPU, decoder on the CPU).

Each part reuses the stage that already does its job:

* **Encoder** (``asr_encoder``): one window graph per size in chunks (``export.asr_encoder_onnx``,
  checked on onnxruntime against torch), then the shared build sequence (``pipelines.sequence``:
  lint, convert with the contract as custom string, inspect, golden replays) and the simulator's
  SNR against fp32 on the check window.  ``--encoder cpu-fp32`` keeps the ONNX on onnxruntime.
* **Decoder** (``asr_decoder``): the text model is the Qwen3 stack the talker is, so it leaves as
  the talker does (``export.talker_onnx.export_talker_pair`` in the CPU export, prefill + decode
  over a fixed-capacity cache), its tied head as a head graph (``export.head_onnx``), both
  quantized by the talker's quantizer stage (``pipelines.cpu_stages.quantize_stage``).
* **Host data**: the token embedding (in the file's dtype, ``.npy``) and the tokenizer, config and
  processor files, inside the plan folder (a plan names only its own files).

* **Accuracy gate** (``asr_accuracy_gate``, ``accuracy.asr_gate``): greedy transcripts of held-out
  clips with the fp32 stages against the plan's (the quantized decoder on onnxruntime, the NPU
  encoder's windows on the simulator), judged by the text-to-speech gate's marks
  (``accuracy.gate``); ``gate="refuse"`` writes no plan below them (the report is written, a
  plan.json of an earlier build removed), ``"warn"`` records the failures as a warning, ``"off"``
  measures nothing.

Resumable (``pipelines.resumable``): each stage re-runs only when its inputs changed.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import DEFAULT_TARGET

ENCODER_PLACEMENTS = ("npu", "cpu-fp32")
DECODER_PLACEMENTS = ("cpu-int4", "cpu-int8", "cpu-fp32")
#: the root's small files the host reads at run time (copied into the plan), when present
HOST_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer_config.json",
              "vocab.json", "merges.txt", "tokenizer.json", "chat_template.json", "chat_template.jinja")
#: decoder capacity (prompt + generated tokens): 30 s of audio is 390 tokens, the official bound
#: on new tokens 512
DEFAULT_CAPACITY = 1024
DEFAULT_PREFILL_B = 32
#: contract model names of the decoder's graphs (the talker's step and head graphs, another model)
DECODER_NAME = "qwen3-asr-decoder"
HEAD_NAME = "qwen3-asr-lm-head"


@dataclass(frozen=True)
class ASRBuildOptions:
    model_dir: str
    out_dir: str
    target: str = DEFAULT_TARGET
    encoder: str = "npu"
    decoder: str = "cpu-int4"
    window_chunks: tuple[int, ...] = (8,)
    capacity: int = DEFAULT_CAPACITY
    prefill_B: int = DEFAULT_PREFILL_B
    int4_block: int = 128
    int4_symmetric: bool = True
    skip_sim: bool = False
    timeout: float | None = None
    force: bool = False
    #: the accuracy gate (``core.thresholds.GATE_MODES``): refuse, warn or off
    gate: str = "refuse"

    def check(self) -> None:
        from rkspeech.core.targets import TARGETS

        if self.target not in TARGETS:
            raise RkspeechError(f"unknown target {self.target!r}; choose one of {', '.join(TARGETS)}")
        if self.encoder not in ENCODER_PLACEMENTS:
            raise RkspeechError(f"--encoder {self.encoder!r}: choose one of {', '.join(ENCODER_PLACEMENTS)}")
        if self.decoder not in DECODER_PLACEMENTS:
            raise RkspeechError(f"--decoder {self.decoder!r}: choose one of {', '.join(DECODER_PLACEMENTS)}")
        if self.capacity < 64 or not 2 <= self.prefill_B <= self.capacity:
            raise RkspeechError(f"--capacity must be >= 64 and 2 <= prefill B <= capacity, got {self.capacity}, "
                                f"{self.prefill_B}")
        if not self.window_chunks or any(k < 1 for k in self.window_chunks):
            raise RkspeechError(f"window sizes must be whole chunks >= 1, got {self.window_chunks}")
        from rkspeech.core.thresholds import GATE_MODES

        if self.gate not in GATE_MODES:
            raise RkspeechError(f"--gate {self.gate!r}: choose one of {', '.join(GATE_MODES)}")


def build_qwen3_asr(options: ASRBuildOptions) -> dict:
    """Run (or resume) every stage; returns the report (also ``build-report.json``) with ``plan``."""
    from rkspeech.core.atomic import write_json
    from rkspeech.models.qwen3_asr.asr_checkpoint import read_asr_config, resolve_asr_root
    from rkspeech.pipelines.asr_gate_stage import asr_gate_section
    from rkspeech.pipelines.resumable import StageRunner

    options.check()
    files = resolve_asr_root(options.model_dir)
    cfg = read_asr_config(files)
    chunks = sorted(set(options.window_chunks))
    too_big = [k for k in chunks if k > cfg.audio.n_window_infer // 100]
    if too_big:
        raise RkspeechError(f"window sizes {too_big} exceed the model's attention window of "
                            f"{cfg.audio.n_window_infer // 100} chunks")
    out = Path(options.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stages = StageRunner(out, options.force)
    net = _LazyNet(files, cfg)
    report = {"model": str(options.model_dir), "target": options.target}
    report["encoder"] = _build_encoder(options, stages, net, files, out, chunks)
    report["decoder"] = _build_decoder(options, stages, net, files, cfg, out)
    net.release()  # the gate runs the graphs: the float32 model (6.9 GB at 1.7B) is not needed beside them
    gate = report["accuracy_gate"] = asr_gate_section(
        options, stages, out, lambda fp32: _records(options, out, report, cfg, fp32=fp32))
    if gate.get("warning"):
        report["warnings"] = [gate["warning"]]
    report["stages"] = stages.timings
    if gate["failures"] and options.gate == "refuse":
        from rkspeech.pipelines.stage_gate import gate_refusal
        from rkspeech.pipelines.vocoder_build import BUILD_REPORT, PLAN_FILE

        write_json(out / BUILD_REPORT, {**report, "plan": None})
        (out / PLAN_FILE).unlink(missing_ok=True)  # an earlier build's plan no longer matches the stages
        raise gate_refusal(gate, out / BUILD_REPORT)
    report["plan"] = str(_write_plan(options, out, report, cfg))
    write_json(out / "build-report.json", report)
    return report


class _LazyNet:
    """The float32 thinker, loaded on first use (a resumed build may need none of it)."""

    def __init__(self, files, cfg):
        self.files, self.cfg, self.net = files, cfg, None

    def get(self):
        if self.net is None:
            from rkspeech.core import progress
            from rkspeech.models.qwen3_asr.asr_model import load_asr_net

            with progress.stage("loading the Qwen3-ASR weights (float32)"):
                self.net = load_asr_net(self.files, self.cfg)
        return self.net

    def release(self) -> None:
        """Drop the loaded model (loaded again if a later stage asks)."""
        import gc

        self.net = None
        gc.collect()


def _weights(files) -> list[Path]:
    return [files.config, *files.weights]


def _build_encoder(options, stages, net, files, out: Path, chunks: list[int]) -> dict:
    from rkspeech.pipelines.sequence import Graph, run_sequence

    folder = out / "asr" / "encoder"
    onnx = {k: folder / f"window_k{k}.onnx" for k in chunks}
    check = {k: folder / "check" / f"window_k{k}.npz" for k in chunks}

    def export():
        import numpy as np
        import torch

        from rkspeech.core.compare import max_abs_diff
        from rkspeech.export.asr_encoder_onnx import EncoderWindow, export_window
        from rkspeech.runtime.runners import open_runner

        rep = {}
        for k in chunks:
            step = EncoderWindow(net.get().audio_tower, k).eval()
            export_window(step, onnx[k])
            inputs = step.dummy_inputs()
            with torch.no_grad():
                want = step(*inputs).numpy()
            feed = dict(zip(step.contract().input_names, (t.numpy() for t in inputs)))
            check[k].parent.mkdir(parents=True, exist_ok=True)
            np.savez(check[k], features=want, **feed)
            with open_runner("ort", onnx[k], threads=1) as r:
                got = r.infer(feed)["features"]
            rep[f"k{k}"] = {"onnx": str(onnx[k]), "ort_max_abs": max_abs_diff(want, got)}
        return rep

    rep = {"placement": options.encoder,
           "export": stages.run("asr_encoder_export", {"chunks": chunks, "format": 1}, _weights(files),
                                lambda: [*onnx.values(), *check.values()], export)}
    if options.encoder != "npu":
        return rep
    graphs = [Graph(f"k{k}", onnx[k], onnx[k].with_suffix(".rknn"), _custom_string(onnx[k])) for k in chunks]
    # the golden replays: onnxruntime's without the simulator; else recorded where _simulate builds it
    rep["sequence"] = run_sequence(stages, graphs, target=options.target, timeout=options.timeout,
                                   prefix="asr_encoder_", golden="ort" if options.skip_sim else None)
    if not options.skip_sim:
        from rkspeech.plan.integrity import golden_path

        rep["simulator"] = stages.run("asr_encoder_simulator", {"target": options.target, "format": 2},
                                      [g.rknn for g in graphs] + list(check.values()),
                                      lambda: [golden_path(g.rknn) for g in graphs],
                                      lambda: _simulate(options, graphs, check, chunks))
    return rep


def _custom_string(path: Path) -> str:
    from rkspeech.contracts.read import read_contract

    return read_contract(path).to_json()


def _simulate(options, graphs, check, chunks) -> dict:
    """SNR and worst-row cosine of each window graph on the simulator against the fp32 torch output,
    and its golden replay recorded on the same simulator (``record_sim_golden``: built once)."""
    import numpy as np

    from rkspeech.core.compare import cosine_per_row, json_number, snr_db
    from rkspeech.pipelines.sequence import record_sim_golden
    from rkspeech.runtime.runners import open_runner

    rep = {}
    for g, k in zip(graphs, chunks):
        data = np.load(check[k])
        feed = {n: data[n] for n in ("chunks", "mask1", "mask2", "key_mask")}
        want = data["features"]
        with open_runner("sim", g.onnx, target=options.target, dtype="fp16") as r:
            got = r.infer(feed)["features"]
            golden = record_sim_golden(g, r, target=options.target)
        tokens = int((feed["key_mask"][0, 0, 0] == 0).sum())
        rep[g.role] = {"snr_db": json_number(snr_db(want[:tokens], got[:tokens])),
                       "worst_cosine": float(cosine_per_row(want[:tokens], got[:tokens]).min()),
                       "finite": bool(np.isfinite(got[:tokens]).all()), "golden": golden}
    return rep


def _build_decoder(options, stages, net, files, cfg, out: Path) -> dict:
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT, quantize_stage

    folder = out / "asr" / "decoder"
    onnx_dir = folder / "onnx"
    cap, B = options.capacity, options.prefill_B
    sources = {"prefill": onnx_dir / f"talker_prefill_B{B}_cap{cap}.onnx",
               "decode": onnx_dir / f"talker_decode_B1_cap{cap}.onnx",
               "head": onnx_dir / "head.onnx"}
    host = folder / "host"
    embed = host / "embed_tokens.npy"

    def export():
        from rkspeech.contracts.head import HeadContract
        from rkspeech.export.head_onnx import export_head_onnx
        from rkspeech.export.talker_onnx import export_talker_pair
        from rkspeech.pipelines.talker_build import onnx_vs_torch
        from rkspeech.stepgraph.talker_step import TalkerStep, weights_fingerprint

        stack = net.get().model
        paths = export_talker_pair(stack, onnx_dir, capacity=cap, prefill_B=B, name=DECODER_NAME, **CPU_EXPORT)
        rep = {}
        for role, path in paths.items():
            step = TalkerStep(stack, capacity=cap, B=1 if role == "decode" else B, name=DECODER_NAME, **CPU_EXPORT)
            rep[role] = {"onnx": str(path), "ort_max_abs": onnx_vs_torch(step, path)}
        w = net.get().head_weight().detach().numpy()
        contract = HeadContract(index=0, hidden=w.shape[1], vocab_size=w.shape[0],
                                fingerprint=weights_fingerprint(stack), model=HEAD_NAME)
        export_head_onnx(w, contract, sources["head"])
        rep["head"] = {"onnx": str(sources["head"]), "vocab": int(w.shape[0])}
        host.mkdir(parents=True, exist_ok=True)
        _write_embedding(files, embed)
        return rep

    rep = {"export": stages.run("asr_decoder_export", {"capacity": cap, "B": B, "format": 1}, _weights(files),
                                lambda: [*sources.values(), embed], export)}
    int4 = {"block_size": options.int4_block, "symmetric": options.int4_symmetric}
    q = quantize_stage(stages, "asr_decoder", options.decoder, sources, folder / "cpu", int4=int4)
    rep.update({"placement": options.decoder, "quantization": q["record"],
                "artifacts": {r: str(p) for r, p in q["artifacts"].items()}})
    # golden replays of the placed graphs on onnxruntime (prefill, decode, then the head on the
    # decode's hidden state), which check-board replays on a board's onnxruntime
    from rkspeech.pipelines.sequence import Graph, golden_graphs
    from rkspeech.plan.integrity import golden_path

    graphs = [Graph(role, Path(p), Path(p), None) for role, p in q["artifacts"].items()]
    golden_graphs(stages, graphs, target=options.target, source="ort", prefix="asr_decoder_")
    rep["goldens"] = {g.role: str(golden_path(g.onnx)) for g in graphs}
    rep["host"] = {name: str(_copy_host(files.root / name, host / name))
                   for name in HOST_FILES if (files.root / name).is_file()}
    rep["host"]["embed"] = str(embed)
    return rep



def _write_embedding(files, path: Path) -> None:
    """``thinker.model.embed_tokens.weight`` as ``.npy`` in the file's dtype (bf16 kept as its uint16
    bits: the host widens only the rows a prompt uses, exactly as torch's ``.float()``)."""
    import numpy as np

    from rkspeech.core.atomic import atomic_path
    from rkspeech.runtime.tts.host_weights import SafetensorsFile

    key = "thinker.model.embed_tokens.weight"
    for w in files.weights:
        f = SafetensorsFile(w)
        if key in f.header:
            raw, _ = f.raw(key)
            with atomic_path(path, suffix=".npy") as tmp:
                np.save(tmp, np.ascontiguousarray(raw))
            return
    raise RkspeechError(f"{files.root}: the weights have no {key}")


def _copy_host(src: Path, dst: Path) -> Path:
    """``src`` copied to ``dst``, left alone when it holds the same bytes (a rewritten copy would
    change the accuracy gate's inputs and run it again on every resumed build)."""
    from rkspeech.core.atomic import atomic_path

    if dst.is_file() and dst.stat().st_size == src.stat().st_size and dst.read_bytes() == src.read_bytes():
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)
    return dst


def _records(options, out: Path, report: dict, cfg, *, fp32: bool = False) -> dict:
    """The ``asr_encoder`` and ``asr_decoder`` records of the plan (``plan.asr`` reads them); with
    ``fp32`` those of its fp32 stages (the encoder's ONNX, the exported decoder), which the gate
    takes for its reference."""
    from rkspeech.plan.asr import DECODER, ENCODER

    def rel(p) -> str:
        return os.path.relpath(Path(p).resolve(), out.resolve())

    npu = options.encoder == "npu" and not fp32
    enc = report["encoder"]
    arts = {}
    for role, r in enc["export"].items():
        onnx = Path(r["onnx"])
        rknn = onnx.with_suffix(".rknn")
        arts[role] = {"onnx": rel(onnx), **({"rknn": rel(rknn)} if npu else {})}
    encoder = {"placement": "npu" if npu else "cpu-fp32", "target": options.target if npu else None,
               "artifacts": arts}
    if "simulator" in enc and npu:
        encoder["simulator"] = enc["simulator"]
    dec = report["decoder"]
    graphs = {role: dec["export"][role]["onnx"] for role in dec["artifacts"]} if fp32 else dec["artifacts"]
    darts = {role: {"onnx": rel(p)} for role, p in graphs.items()}
    darts.update({f"host:{name}": {"host": rel(p)} for name, p in dec["host"].items()})
    decoder = {"placement": "cpu-fp32" if fp32 else options.decoder, "target": None, "artifacts": darts,
               "capacity": options.capacity, "eos_token_ids": list(cfg.eos_token_ids)}
    if not fp32:
        decoder["goldens"] = {role: rel(p) for role, p in dec["goldens"].items()}
        if dec["quantization"]:
            decoder["quantization"] = dec["quantization"]
    return {ENCODER: encoder, DECODER: decoder}


def _write_plan(options, out: Path, report: dict, cfg) -> Path:
    """``plan.json`` with the ``asr_encoder`` and ``asr_decoder`` records and what the plan keeps of
    the accuracy gate (``build.accuracy_gate``)."""
    from rkspeech.pipelines.stage_gate import plan_gate
    from rkspeech.pipelines.vocoder_build import PLAN_FILE
    from rkspeech.plan.plan import write_plan_data
    from rkspeech.plan.record import PLAN_FORMAT

    return write_plan_data(out / PLAN_FILE, {"format": PLAN_FORMAT, **_records(options, out, report, cfg),
                                             "build": {"accuracy_gate": plan_gate(report["accuracy_gate"])}})
