"""Decoder-only transformer over SID tokens: model, training, checkpoints, KV-cache decoding."""
