"""Pure clustering library: statements -> embeddings -> deduplicated clusters -> names, stats, identity."""
