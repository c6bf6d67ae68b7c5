"""The offender dashboard in Django admin: who was limited, from where, by which policy.

``services`` reads Redis through the offender reader and the engine,
``actions`` resets, blocks and allow-lists, ``present`` turns both into what
templates and the JSON endpoint show, ``views`` serves them under the policy
admin (see ``urls``). docs/dashboard.md describes the pages and the JSON.
"""
