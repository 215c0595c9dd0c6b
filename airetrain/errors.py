"""The error types users see: a message that names the key, or the filesystem, and the fix."""


class ConfigError(ValueError):
    """Bad configuration or an impossible request, refused before anything runs."""


class NoSpaceError(OSError):
    """A write that did not fit: its message names the filesystem, its free space and the size needed
    (fsutil.py raises it)."""

    def __str__(self) -> str:
        return self.strerror
