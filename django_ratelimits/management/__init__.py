"""Management commands of django-ratelimits."""
