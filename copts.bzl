"""Compiler options for runreaper's own code: warnings are errors."""

COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
]
