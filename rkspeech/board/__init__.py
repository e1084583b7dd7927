"""What a board needs to verify and measure itself: golden replays (``golden``), the replay check
(``check``), the board doctor (``doctor``, ``compat``)."""
