"""The experiments app (label ``muse_experiments``: its tables, permissions and migrations keep the
names they had when the app was the project's top package)."""
