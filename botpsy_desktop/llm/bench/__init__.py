"""The bench (not the product): speed and memory through raw llama.cpp, the engine, the agent."""
