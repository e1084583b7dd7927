"""The base every graph contract shares: a versioned format string, the graph's I/O, its state.

Contracts are frozen dataclasses over :class:`Contract`.  A subclass names its ``FORMAT``
(``rkspeech-<kind>/<version>``) and ``KIND`` (the word error messages use), and implements
``input_shapes``, ``output_shapes``, ``to_dict`` and ``from_dict``; JSON, names and the version
come from here.  ``to_json`` is compact: the rknn-toolkit2 build's custom string should stay
under 1 KB (sherpa-onnx keeps it so).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from rkspeech.core.errors import RkspeechError

#: ONNX metadata key (and the .rknn custom string's content) of every contract.
CONTRACT_KEY = "rkspeech.contract"


def contract_dict(text: str, fmt: str, what: str) -> dict:
    """The JSON object of a contract string whose ``format`` is ``fmt``; one line otherwise
    (``what`` names the kind: "talker", "code-predictor")."""
    try:
        d = json.loads(text)
    except (json.JSONDecodeError, TypeError, RecursionError) as exc:
        raise RkspeechError(f"{what} contract is not valid JSON: {exc}") from None
    if not isinstance(d, dict) or d.get("format") != fmt:
        raise RkspeechError(f"not an rkspeech {what} contract (format "
                            f"{d.get('format') if isinstance(d, dict) else None!r}, expected {fmt!r})")
    return d


class Contract:
    """Shapes and constants of one compiled graph (a frozen dataclass in each subclass)."""

    FORMAT: ClassVar[str]
    KIND: ClassVar[str]

    @property
    def version(self) -> int:
        return int(self.FORMAT.rsplit("/", 1)[1])

    def input_shapes(self) -> dict[str, list[int]]:
        raise NotImplementedError

    def output_shapes(self) -> dict[str, list[int]]:
        raise NotImplementedError

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self.input_shapes())

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(self.output_shapes())

    @property
    def state_numel(self) -> int:
        """Floats the host keeps between calls for this graph (its cache); 0 when stateless."""
        return 0

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Contract":
        raise NotImplementedError

    @classmethod
    def from_json(cls, text: str) -> "Contract":
        return cls.from_dict(contract_dict(text, cls.FORMAT, cls.KIND))
