"""spectune: autotune vLLM speculative-decoding serving configs with Optuna."""

__version__ = "0.1.0"
