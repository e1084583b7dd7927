"""The cloning encoders' stage records (``plan.sections.CLONE_ROLES``): read into ``Plan.encoders``,
each file checked for the contract its record names, a missing one refused in one line; a plan
without them loads as before."""

from __future__ import annotations

import pytest

from rkspeech.core.errors import RkspeechError


def _rewrite(out, name, edit):
    from rkspeech.plan.plan import read_plan, write_plan_data

    raw = read_plan(out / "plan.json")
    edit(raw)
    return write_plan_data(out / name, raw)


def test_a_record_naming_the_other_encoders_graph_is_refused(tts_base_build):
    from rkspeech.plan.plan import load_plan

    out = tts_base_build[1]

    def swap(raw):
        raw["speaker_encoder"]["artifacts"]["encoder"]["onnx"] = "clone/speech_encoder.onnx"

    with pytest.raises(RkspeechError, match="carries contract format 'rkspeech-speech-encoder/1', the plan says "
                                            "'rkspeech-speaker-encoder/1'") as e:
        load_plan(_rewrite(out, "plan_swapped.json", swap), backend="ort")
    assert "\n" not in str(e.value)


def test_missing_roles_and_plans_without_records(tts_base_build):
    from rkspeech.plan.plan import load_plan

    out = tts_base_build[1]

    def no_role(raw):
        rec = raw["speech_encoder"]
        rec["artifacts"] = {"main": rec["artifacts"]["encoder"]}
        rec["goldens"] = {"main": rec["goldens"]["encoder"]}  # the golden follows its role

    with pytest.raises(RkspeechError, match="speech_encoder.artifacts must hold encoder"):
        load_plan(_rewrite(out, "plan_role.json", no_role), backend="ort")

    def without(raw):
        raw.pop("speaker_encoder")
        raw.pop("speech_encoder")

    plan = load_plan(_rewrite(out, "plan_without.json", without), backend="ort")
    assert plan.encoders == {} and sorted(plan.stages) == ["code_predictor", "talker"]
