"""Label-constrained category classification of item text (`genret classify`)."""
