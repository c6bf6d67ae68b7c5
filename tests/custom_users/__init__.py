"""User models as real projects write them, for the tests of the package under each.

``tests/custom_user_settings.py`` installs this app and makes one of its models the
user model (``RATELIMITS_TEST_USER_MODEL``); ``test_user_models.py`` runs
``cases.py`` under each in its own pytest process (a user model is chosen once per
process, before any model loads).
"""
