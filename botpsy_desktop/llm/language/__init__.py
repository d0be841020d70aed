"""The model's language: its chat template, the output parser and the tool-call grammar."""
