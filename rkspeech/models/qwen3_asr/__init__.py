"""Qwen3-ASR: the model root's config and files, and synthetic roots in the published format."""
