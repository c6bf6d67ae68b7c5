"""Dashboard tests: admin pages, the offender dashboard (also in Chromium), its permissions."""
