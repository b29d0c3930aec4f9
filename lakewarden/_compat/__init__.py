"""Private names of the libraries lakewarden stands on, imported here and nowhere else: one module per library.

Each module says which versions it was written for (`SUPPORTED`, the range pyproject.toml pins), what upstream
function or attribute each name is, and why lakewarden needs it. A name that an installed version no longer has
fails the module's import with a message naming the library and the versions lakewarden supports;
tests/test_compat.py checks every contract (names, signatures, attributes) against the installed versions.
"""
