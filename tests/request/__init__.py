"""Request-path tests: middleware, decorators, DRF, the compatibility layer, identities,
hostile input."""
