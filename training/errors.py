"""The one exception a recipe raises for a problem its user can fix."""


class TrainingError(Exception):
    """A bad argument, a missing file or a mismatched checkpoint.

    The recipes' command lines print its message as one line and exit 2,
    never a traceback.
    """
