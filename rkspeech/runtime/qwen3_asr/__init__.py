"""Qwen3-ASR transcription from a built plan: encoder windows, decoder graphs, host prompt and text (no torch)."""
