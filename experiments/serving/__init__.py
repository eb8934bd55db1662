"""The retrieval service behind `genret serve` and its loopback load test."""
