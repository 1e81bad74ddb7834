"""The Kubernetes API: our own aiohttp client, kubeconfig and in-cluster connections (and the
rules for untrusted kubeconfigs), aggregated discovery, the watch loop, Leases."""
