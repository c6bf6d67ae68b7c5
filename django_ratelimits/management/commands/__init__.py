"""``manage.py ratelimits``: see :mod:`.ratelimits`."""
