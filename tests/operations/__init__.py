"""Operations tests: the management command, the system checks, the settings."""
