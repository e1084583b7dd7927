"""Sub-commands of the ``rkspeech`` CLI, one module each (see ``rkspeech.cli``)."""
