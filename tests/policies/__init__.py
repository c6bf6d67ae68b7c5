"""Policy tests: the rate grammar, the Policy model, path patterns, key functions, the registry."""
