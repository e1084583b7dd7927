"""Board step time estimated from the compiler's layer table (``rkspeech estimate``).

Standard library only: ``steptime.estimate_path`` reads a build log (or finds the one beside an
.rknn), ``steptime.estimate_layers`` prices parsed layers under stated, overridable assumptions.
"""

from rkspeech.estimate.steptime import (  # noqa: F401
    Assumptions,
    Estimate,
    classify,
    estimate_layers,
    estimate_path,
    find_build_log,
)
