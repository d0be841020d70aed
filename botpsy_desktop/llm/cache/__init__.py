"""Saved model states for a prompt's start: in memory (prefix_cache) and on disk (prefix_store)."""
