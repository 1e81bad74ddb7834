"""State shared beyond one process: the fact index (memory, Redis Streams) and watch resume
cursors (none, Redis)."""
