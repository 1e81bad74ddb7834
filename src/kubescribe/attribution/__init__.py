"""Who made a change: audit EventList decoding, the fact index protocol, admission facts of
the change webhook, the resolver that joins facts with watch events, CommitRequest authors."""
