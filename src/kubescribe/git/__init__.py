"""Git: the per-namespace branch worker (FIFO, commit windows, authors), building a batch's
commits in memory, compare-and-swap pushes, transports and credentials, signing, URL policy."""
