"""posenc_ref: reference implementations of positional encodings for transformers."""
