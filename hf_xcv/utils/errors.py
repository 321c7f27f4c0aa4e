"""What the command line reports as the user's mistake rather than as a fault of hf_xcv.

``hf-xcv-train`` and ``hf-xcv-convert`` print a :class:`UsageError` (a missing split, a vocabulary of the wrong size,
an option value out of range, a file that is not there) as one line and exit with status 2; every other exception is
an internal error and keeps its traceback. Both are ValueErrors, so code that catches ValueError is unchanged.
"""

from __future__ import annotations


class UsageError(ValueError):
    """Input a user gave is wrong in a way they can fix; the message says what is wrong and what to do."""


class MissingColumnError(UsageError, KeyError):
    """A dataset lacks a column or a value a program needs: a KeyError too, which is what a missing key raises."""

    def __str__(self) -> str:  # the message as written, not KeyError's quoted repr
        return ValueError.__str__(self)
