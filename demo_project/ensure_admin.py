"""Create or update the demo's superuser and print how to log in.

Run by ``make demo`` as ``python -m demo_project.ensure_admin``. The password
is ``DEMO_ADMIN_PASSWORD`` from the environment, or a fixed demo password: this
is a local demo bound to 127.0.0.1, not a deployment.
"""

from __future__ import annotations

import os

import django

DEFAULT_PASSWORD = "ratelimits-demo"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_project.demo_settings")
    django.setup()
    from django.contrib.auth import get_user_model

    username = os.environ.get("DEMO_ADMIN_USER", "admin")
    password = os.environ.get("DEMO_ADMIN_PASSWORD", DEFAULT_PASSWORD)
    site = os.environ.get("DEMO_URL", "http://127.0.0.1:8000").rstrip("/")
    user_model = get_user_model()
    user, created = user_model._default_manager.get_or_create(
        **{user_model.USERNAME_FIELD: username},
        defaults={"email": f"{username}@example.com"},
    )
    user.is_staff = True
    user.is_superuser = True
    user.is_active = True
    user.set_password(password)
    user.save()
    print(
        f"demo: superuser {username!r} {'created' if created else 'updated'}.\n"
        f"demo:   log in at {site}/admin/ as {username} / {password}"
    )


if __name__ == "__main__":
    main()
