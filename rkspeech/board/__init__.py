"""What a board needs to verify and measure itself: the golden replay check (``check``: ``rkspeech
check-board``), the board doctor (``doctor``) and its rules as data (``compat``).  The golden
files themselves are ``runtime.golden`` (the verify stages below this layer record them)."""
