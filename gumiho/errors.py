"""One exception type for every input problem the library reports to a user."""


class GumihoError(ValueError):
    """Bad input or a model/drafter mismatch. The message says what is wrong and how
    to fix it; callers (the app, the CLIs) show it as is."""
