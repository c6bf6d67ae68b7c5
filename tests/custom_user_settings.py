"""The test settings with one of ``tests.custom_users``' models as the user model.

``RATELIMITS_TEST_USER_MODEL`` names it (``UUIDUser``, ``EmailUser`` or ``CharPkUser``);
``tests/custom_users/test_user_models.py`` runs a pytest process per model with them.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.custom_users"]
AUTH_USER_MODEL = "custom_users." + os.environ.get("RATELIMITS_TEST_USER_MODEL", "UUIDUser")
