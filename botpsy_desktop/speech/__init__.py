"""Voice input: the microphone, speech-to-text engines and their models (no Qt, no llama_cpp)."""
