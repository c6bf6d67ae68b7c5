"""Engine tests: the Lua scripts, keys, connection, breaker and reader against real Redis."""
