"""The evaluation harness: cases, a sandbox per case, the full app path, scores and reports."""
