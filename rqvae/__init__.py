"""Item text embeddings and the RQ-VAE tokenizer that gives every item a unique Semantic ID."""
