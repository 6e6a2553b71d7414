"""The models that listen to audio (speech recognition, speaker embeddings) and the scores they
give a take, run in a process of their own beside the engine (process.py says why)."""
