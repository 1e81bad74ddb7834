"""Network names and addresses (pure): one grammar for repository and API server URLs, and the
address policy that keeps the operator from being used as a network probe."""
