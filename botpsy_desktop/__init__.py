"""botpsy-desktop: a private desktop assistant running BotPsy locally through llama.cpp."""

__version__ = "0.1.0"
