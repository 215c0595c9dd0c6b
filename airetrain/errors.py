"""The one error type users see: a message that names the key and the fix."""


class ConfigError(ValueError):
    """Bad configuration or an impossible request, refused before anything runs."""
