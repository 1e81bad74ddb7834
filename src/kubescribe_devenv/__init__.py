"""Developer environment: a real local control plane and Git remote for tests, demo, benchmarks."""
