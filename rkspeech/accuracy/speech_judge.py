"""The speech check's verdict: character error rates of two transcriptions of the same sentences.

The same held-out sentences are spoken twice, through the fp32 stages (the *reference* side) and
through the plan (the *plan* side), and both are transcribed (``pipelines.speech_check``).  Here:

* :func:`normalize_text`: what is compared.  Unicode NFKC, case folded, every punctuation or
  symbol character (Unicode categories P* and S*) made a space, white space collapsed to one
  space and stripped.  Letters of any script and digits are kept as they are: "2026" and "two
  thousand twenty-six" differ, which is why the check's default sentences have no digits
  (Whisper's number formatting would count as errors).
* :func:`edit_distance`: the plain Levenshtein distance (insertions, deletions, substitutions of
  one character each cost 1), two rows of ``len(hypothesis) + 1`` integers.
* :func:`cer`: edits over the normalized reference's characters (spaces included); over several
  sentences (:func:`corpus_cer`) the edits and characters are summed first, so a long sentence
  weighs more than a short one (the usual corpus CER).
* :func:`judge_speech`: the verdict.  The CER of each side is measured against the *text* that
  was spoken; the plan's delta is ``plan CER - fp32 CER`` (Whisper's own errors on this voice
  cancel out).  When the fp32 side itself does not speak (its CER above ``max_reference_cer``:
  a synthetic root's random weights make noise), nothing is judged: a delta between two noises
  says nothing about the plan.

Pass marks: ``core.thresholds.SPEECH_MAX_CER_DELTA`` and ``SPEECH_MAX_REFERENCE_CER``
(docs/speech-check.md says where they come from).  Standard library only.
"""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass, field

from rkspeech.core.thresholds import SPEECH_MAX_CER_DELTA, SPEECH_MAX_REFERENCE_CER

#: :class:`SpeechVerdict` ``status`` values
PASS, FAIL, NOT_JUDGED = "pass", "fail", "not-judged"


def normalize_text(text: str) -> str:
    """``text`` as compared (see the module docstring): NFKC, case folded, punctuation and symbols
    made spaces, digits kept, white space collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    kept = "".join(" " if unicodedata.category(c)[0] in "PSZC" else c for c in text)
    return " ".join(kept.split())


def edit_distance(reference, hypothesis) -> int:
    """Levenshtein distance between two sequences (each insertion, deletion or substitution costs 1)."""
    if len(reference) < len(hypothesis):  # the shorter one as the row: less memory, same distance
        reference, hypothesis = hypothesis, reference
    previous = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, 1):
        current = [i]
        for j, h in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1]


@dataclass(frozen=True)
class CerCount:
    """Character edits and the reference's characters (both normalized)."""
    edits: int
    chars: int

    @property
    def cer(self) -> float:
        """edits / chars; an empty reference: 0.0 when the hypothesis is empty too, else 1.0."""
        if self.chars:
            return self.edits / self.chars
        return 0.0 if not self.edits else 1.0


def count(reference: str, hypothesis: str) -> CerCount:
    ref, hyp = normalize_text(reference), normalize_text(hypothesis)
    return CerCount(edit_distance(ref, hyp), len(ref))


def cer(reference: str, hypothesis: str) -> float:
    """The character error rate of ``hypothesis`` against ``reference`` (both normalized)."""
    return count(reference, hypothesis).cer


def corpus_cer(references, hypotheses) -> float:
    """CER over several sentences: summed edits over summed reference characters."""
    counts = [count(r, h) for r, h in zip(references, hypotheses, strict=True)]
    return CerCount(sum(c.edits for c in counts), sum(c.chars for c in counts)).cer


def speaks(texts, reference_transcripts, max_reference_cer: float = SPEECH_MAX_REFERENCE_CER) -> bool:
    """Whether the fp32 side speaks: its CER over ``texts`` is at most ``max_reference_cer``; when it
    does not, :func:`judge_speech` judges nothing."""
    return corpus_cer(texts, reference_transcripts) <= max_reference_cer


def cannot_speak(texts, reference_transcripts, max_reference_cer: float = SPEECH_MAX_REFERENCE_CER) -> bool:
    """Whether the fp32 side is already known not to speak after the first ``len(reference_transcripts)``
    of ``texts``: their edits alone exceed ``max_reference_cer`` of all the texts' characters, so
    no later sentence can bring the CER down to the mark (and the CER of the sentences heard so
    far is above it too: :func:`judge_speech` of them is not judged).  Lets the check stop early on
    a root that makes noise (5 sentences of noise: decided after 3)."""
    heard = list(reference_transcripts)
    edits = sum(count(t, h).edits for t, h in zip(texts, heard))
    chars = sum(len(normalize_text(t)) for t in texts)
    return edits > max_reference_cer * chars


@dataclass(frozen=True)
class SpeechVerdict:
    """What :func:`judge_speech` decided.  ``status``: ``pass``, ``fail`` or ``not-judged`` (the
    fp32 side does not speak); ``plan_cer`` and ``delta`` are None when not judged; ``message``:
    the verdict in one line; ``sentences``: per sentence its text, transcripts and CERs."""
    status: str
    reference_cer: float
    plan_cer: float | None
    delta: float | None
    max_cer_delta: float
    max_reference_cer: float
    message: str
    sentences: list = field(default_factory=list)

    @property
    def judged(self) -> bool:
        return self.status != NOT_JUDGED

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def to_dict(self) -> dict:
        return asdict(self)


def judge_speech(texts, reference_transcripts, plan_transcripts=None, *,
                 max_cer_delta: float = SPEECH_MAX_CER_DELTA,
                 max_reference_cer: float = SPEECH_MAX_REFERENCE_CER) -> SpeechVerdict:
    """The verdict over ``texts`` (what was spoken) and the transcripts of each side, in the same
    order.  ``plan_transcripts`` may be None when the reference side was found not to speak
    (the caller need not synthesize the plan side then); it is required otherwise.

    * not judged: the fp32 CER is above ``max_reference_cer``;
    * fail: ``plan CER - fp32 CER > max_cer_delta``;
    * pass: otherwise (a plan that transcribes better than fp32 passes)."""
    texts, reference_transcripts = list(texts), list(reference_transcripts)
    if not texts:
        raise ValueError("judge_speech needs at least one sentence")
    ref_cer = round(corpus_cer(texts, reference_transcripts), 4)
    rows = [{"text": t, "reference_transcript": r, "reference_cer": round(cer(t, r), 4)}
            for t, r in zip(texts, reference_transcripts, strict=True)]
    marks = {"max_cer_delta": max_cer_delta, "max_reference_cer": max_reference_cer}
    if not speaks(texts, reference_transcripts, max_reference_cer):
        return SpeechVerdict(NOT_JUDGED, ref_cer, None, None, **marks, sentences=rows,
                             message=f"not judged: the fp32 side does not speak (its CER {ref_cer:.3f} > "
                                     f"{max_reference_cer:g} over {len(texts)} sentences); nothing was judged")
    if plan_transcripts is None:
        raise ValueError("the fp32 side speaks: judge_speech needs the plan's transcripts")
    plan_transcripts = list(plan_transcripts)
    plan_cer = round(corpus_cer(texts, plan_transcripts), 4)
    delta = round(plan_cer - ref_cer, 4)
    for row, hyp in zip(rows, plan_transcripts, strict=True):
        row.update(plan_transcript=hyp, plan_cer=round(cer(row["text"], hyp), 4))
    ok = delta <= max_cer_delta
    message = (f"{'pass' if ok else 'FAIL'}: CER fp32 {ref_cer:.3f}, plan {plan_cer:.3f}, delta {delta:+.3f} "
               f"({'<=' if ok else '>'} {max_cer_delta:g}) over {len(texts)} sentences")
    return SpeechVerdict(PASS if ok else FAIL, ref_cer, plan_cer, delta, **marks, message=message, sentences=rows)
