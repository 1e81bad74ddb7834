"""The reconcilers: the plan compiler (pure), the manager loop that runs streams and branch
workers, GitProvider/ClusterProvider runtime, encryption, CommitRequests, Leases and resume
cursors for several replicas, the change webhook registration, and status."""
