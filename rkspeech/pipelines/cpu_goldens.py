"""Golden replays of the CPU-placed stages (issue 40): what ``rkspeech check-board`` replays to
check a board's onnxruntime kernels (ARM int8 / int4) against the build host's.

A CPU stage's graphs (the talker's ``prefill`` / ``decode``; the code predictor's ``step`` or
``frame``, its ``start`` graph and heads ``head1`` ...) run the way ``speak`` runs them: the
numpy host loop (``runtime.tts.numpy_loop.NumpyTTSModel``) over the plan's variant graphs on
onnxruntime, greedy, :data:`GOLDEN_UTTERANCES` short utterances of at most
:data:`GOLDEN_FRAMES` frames.  Each graph's runner is wrapped by a recorder
(``core.capture.RecordingRunner``) that keeps its first :data:`GOLDEN_CALLS` calls: the inputs
the generation really fed it and this host's onnxruntime outputs.  Those become the graph's
golden (``runtime.golden.golden_from_calls``; ``X.onnx`` -> ``X.golden.npz`` beside it), chained
where the calls follow one another (the talker's decode, the code predictor's step: the cache is
stored for the first call only, the board's own carried forward).

State bytes: a chained golden stores its first call's cache.  The first decode call's cache holds
the prompt's keys and values (zeros beyond, which compress to nothing); the prefill and the start
graph begin from an empty cache.  Sizes measured on the reduced builds: docs/board.md.

One resumable stage (``cpu_goldens``); torch is not imported (the numpy loop runs it).
"""

from __future__ import annotations

from pathlib import Path

#: calls kept per graph (as ``runtime.golden.GOLDEN_STEPS`` for the NPU graphs)
GOLDEN_CALLS = 3
#: utterances generated (each begins with a prefill from an empty cache: one prefill call each)
GOLDEN_UTTERANCES = 3
#: frames per utterance at most (4 frames: 3 decode calls, a start call per frame)
GOLDEN_FRAMES = 4
#: the texts spoken (short: the prompt's keys and values are the decode golden's state)
GOLDEN_TEXTS = ("Hello.", "Good day.", "One, two.")
#: bump when what is recorded changes (the resumable stage then runs again)
GOLDEN_VERSION = 1


def golden_roles(talker: dict | None, code_predictor: dict | None) -> dict[str, dict[str, Path]]:
    """stage -> role -> graph of every CPU graph to record (stages placed ``npu`` drive the
    generation and are not recorded): ``talker``: ``{"placement", "graphs": {"prefill", "decode"}}``;
    ``code_predictor``: ``{"placement", "role": step|frame, "graph": path, "heads": {j: path} |
    None, "start": path | None}``."""
    out: dict[str, dict[str, Path]] = {}
    if talker and talker["placement"] != "npu":
        out["talker"] = {r: Path(p) for r, p in talker["graphs"].items() if p is not None}
    if code_predictor and code_predictor["placement"] != "npu":
        roles = {code_predictor["role"]: Path(code_predictor["graph"])}
        if code_predictor.get("start"):
            roles["start"] = Path(code_predictor["start"])
        for j, p in sorted((code_predictor.get("heads") or {}).items(), key=lambda kv: int(kv[0])):
            roles[f"head{int(j)}"] = Path(p)
        out["code_predictor"] = roles
    return out


def record_cpu_goldens(stages, files, *, talker: dict | None, code_predictor: dict | None,
                       threads: int | None = None) -> dict:
    """Write the golden of every CPU graph (:func:`golden_roles`) of a model root (``files``:
    ``ModelFiles``) beside it.  ``talker`` / ``code_predictor`` as :func:`golden_roles` takes
    them; a stage placed ``npu`` gives its exported ONNX (``graphs`` / ``graph``: run on
    onnxruntime to drive the generation, not recorded); None: the stage stays in torch, and
    nothing is recorded (the numpy loop needs both as graphs).  Returns ``{"goldens": {stage:
    {role: path}}, "graphs": {stage: {role: report}}}`` (each report: calls, chained, bytes on
    disk, state / input / output bytes), ``{}`` when no stage is on the CPU, or ``{"skipped":
    why}``.  One resumable stage (``cpu_goldens``)."""
    from rkspeech.plan.integrity import golden_path

    roles = golden_roles(talker, code_predictor)
    if not roles:
        return {}
    if talker is None or code_predictor is None:
        return {"skipped": f"the {'talker' if talker is None else 'code predictor'} stays in torch: the numpy "
                           "loop that records the CPU stages' goldens needs both stages as graphs"}
    graphs = [p for r in roles.values() for p in r.values()]
    drivers = [Path(p) for p in talker["graphs"].values()] + [Path(code_predictor["graph"])]
    args = {"calls": GOLDEN_CALLS, "utterances": GOLDEN_UTTERANCES, "frames": GOLDEN_FRAMES,
            "texts": list(GOLDEN_TEXTS), "version": GOLDEN_VERSION, "threads": threads,
            "roles": {s: sorted(r) for s, r in roles.items()}, "code_predictor_form": code_predictor["role"]}

    def work():
        return _record(files, talker, code_predictor, roles, threads)

    report = stages.run("cpu_goldens", args, [Path(files.config), Path(files.weights), *dict.fromkeys(drivers + graphs)],
                        lambda: [golden_path(p) for p in graphs], work)
    return {"goldens": {s: {role: golden_path(p) for role, p in r.items()} for s, r in roles.items()},
            "graphs": report}


def _record(files, talker, code_predictor, roles, threads) -> dict:
    from rkspeech.contracts.read import read_contract
    from rkspeech.core import progress
    from rkspeech.core.capture import RecordingRunner, sample_request, step_sine_clip
    from rkspeech.core.errors import RkspeechError
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions
    from rkspeech.plan.integrity import golden_path
    from rkspeech.runtime.golden import golden_bytes, golden_from_calls, save_golden
    from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel
    from rkspeech.runtime.tts.open_stages import open_code_predictor, open_talker_for

    tts = NumpyTTSModel.load(files.root)
    calls: dict[tuple[str, str], tuple[list, list]] = {}

    def recorder(stage):
        def wrap(role, runner):
            feeds, outs = calls.setdefault((stage, role), ([], []))
            return RecordingRunner(runner, feeds, outputs=outs, limit=GOLDEN_CALLS, owns=True)
        return wrap

    opened = []
    try:
        t = open_talker_for(tts, {r: {"onnx": p} for r, p in talker["graphs"].items()}, "ort", threads=threads)
        opened.append(t)
        cp = open_code_predictor(code_predictor["role"], code_predictor["graph"], "ort", model=tts, threads=threads,
                                 heads=code_predictor.get("heads"), start=code_predictor.get("start"))
        opened.append(cp)
        for stage, backend in (("talker", t), ("code_predictor", cp)):
            if stage in roles:
                backend.wrap_runners(recorder(stage))
        tts.use_backends(talker=t, code_predictor=cp)
        opts = GenerationOptions.greedy(max_new_tokens=GOLDEN_FRAMES + 1)
        with progress.stage(f"golden replays of the CPU stages ({GOLDEN_UTTERANCES} utterances)"):
            for i in range(GOLDEN_UTTERANCES):
                for _ in tts.generate_frames(GOLDEN_TEXTS[i % len(GOLDEN_TEXTS)], options=opts,
                                             **sample_request(tts, i, ref_audio=step_sine_clip())):
                    pass
    finally:
        for b in opened:
            b.close()
    report: dict[str, dict] = {}
    for stage, rs in roles.items():
        for role, path in rs.items():
            feeds, outs = calls.get((stage, role), ([], []))
            if not feeds:
                raise RkspeechError(f"cpu goldens: {stage} {role} ({path.name}) was not called in "
                                    f"{GOLDEN_UTTERANCES} utterances; report this")
            try:
                contract = read_contract(path)
            except RkspeechError:
                contract = None
            golden = golden_from_calls(role, contract, feeds, outs, inputs="generation",
                                       texts=list(GOLDEN_TEXTS[:GOLDEN_UTTERANCES]), source="ort",
                                       placement="cpu")
            p = save_golden(golden_path(path), golden)
            report.setdefault(stage, {})[role] = {"calls": golden.steps, "chained": bool(golden.chain),
                                                  "bytes": p.stat().st_size, **{f"{k}_bytes": v for k, v in
                                                                               golden_bytes(golden).items()}}
    return report
