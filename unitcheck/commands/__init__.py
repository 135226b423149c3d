"""One module per CLI subcommand that needs torch (imported lazily)."""
