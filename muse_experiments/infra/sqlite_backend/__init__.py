"""SQLite engine whose writers queue instead of sleeping in SQLite's busy handler (:mod:`.base`)."""
