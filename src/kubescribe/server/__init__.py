"""The HTTPS sites: the audit receiver, the admission webhook (CommitRequest requesters and
change facts), health and metrics; client-certificate identities and bounds."""
