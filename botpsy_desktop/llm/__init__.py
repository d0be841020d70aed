"""The model layer: the Backend interface (backend.py, types.py) and, in folders, the engines, the
models on disk, the model's language (template, parser, grammar), the prefix caches, the bench."""
