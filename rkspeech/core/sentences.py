"""Sentences out of text: text that arrives in pieces (the server's Wyoming ``synthesize-chunk``)
and long texts spoken one sentence at a time (``rkspeech speak``).

:class:`SentenceSplitter` scans each character once: a feed looks for a sentence end only in
the new text (and the one character before it, the look-behind), and cut text is dropped from
the front.  Splitting the whole buffer again on every chunk made a long stream quadratic (a
20 MB stream once stalled the event loop for 1.8 s at a time).
"""

from __future__ import annotations

import re

#: a sentence ends at . ! ? (and their CJK forms) followed by white space
SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")


class SentenceSplitter:
    def __init__(self):
        self.text = ""  # what has not been cut into a sentence yet
        self._scanned = 0  # characters of ``text`` already searched for a sentence end
        self.chars_scanned = 0  # total work, for tests: stays proportional to the input

    def feed(self, piece: str) -> list[str]:
        """Append ``piece``; the sentences it completed, in order."""
        self.text += piece
        sentences, cut = [], 0
        # only the new text is searched (the look-behind still sees the character before ``pos``);
        # a match is cut at once, so none straddles the scanned and the new text
        pos = self._scanned
        for m in SENTENCE_END.finditer(self.text, pos):
            sentences.append(self.text[cut:m.start()])
            cut = m.end()
        self.chars_scanned += len(self.text) - pos
        self._scanned = len(self.text)
        if cut:
            self.text = self.text[cut:]
            self._scanned -= cut
        return sentences

    def rest(self) -> str:
        """The text after the last complete sentence (said at the end of the stream)."""
        text, self.text, self._scanned = self.text, "", 0
        return text


#: a "sentence" longer than this (no sentence end) is cut at the last white space before it, so
#: one utterance's prompt stays short whatever the text
MAX_SENTENCE_CHARS = 400


def sentences(text: str, max_chars: int = MAX_SENTENCE_CHARS) -> list[str]:
    """``text`` cut at sentence ends (as :class:`SentenceSplitter`) and, within a sentence longer
    than ``max_chars``, at the last white space before each ``max_chars`` (else hard at it);
    empty pieces dropped."""
    splitter = SentenceSplitter()
    out = []
    for sentence in splitter.feed(text) + [splitter.rest()]:
        while len(sentence) > max_chars:
            cut = sentence.rfind(" ", 1, max_chars + 1)
            cut = cut if cut > 0 else max_chars
            out.append(sentence[:cut])
            sentence = sentence[cut:].lstrip()
        out.append(sentence)
    return [s for s in out if s.strip()]
