"""Every benchmark: constraints, label masks, the live index, membership, training and decoding."""
