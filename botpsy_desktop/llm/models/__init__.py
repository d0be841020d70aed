"""Models on disk: the catalog, downloads, GGUF header checks, CPU weight layouts, the installed."""
