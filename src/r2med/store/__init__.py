"""The store: result files in the official layout, runs, caches; every write atomic."""
