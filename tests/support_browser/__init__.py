"""Helpers for the browser test: a throw-away JupyterLab server and a headless chromium page."""
