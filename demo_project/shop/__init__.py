"""The demo's small shop: a JSON API, a login form, a DRF endpoint and seeded policies."""
