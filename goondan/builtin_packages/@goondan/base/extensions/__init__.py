"""Marks the extension directory as a package so the modules can share ``_config`` (for type
checkers; goondan itself loads each entry by path as a package rooted here)."""
