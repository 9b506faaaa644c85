"""Helpers for the test suite: job runners that worker processes can import by name."""
