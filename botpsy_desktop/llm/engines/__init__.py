"""The engines that run a turn: llama.cpp in a worker process, its app side, llama-server."""
