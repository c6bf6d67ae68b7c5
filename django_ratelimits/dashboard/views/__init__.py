"""The dashboard's views: the offenders page and its JSON, one identity, its actions."""
