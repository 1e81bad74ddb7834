"""Git transport security: credentials from a Secret and the pygit2 callbacks that use them.

`secret.Credentials.from_secret_data` accepts the key names people already have (Kubernetes
`kubernetes.io/ssh-auth` and `basic-auth`, Flux and Argo CD repository Secrets).
`callbacks.remote_callbacks(creds, url)` answers libgit2's credential requests and checks the
server:

* SSH host keys fail closed (`known_hosts`): the key the server presents must be listed for
  `host` (port 22) or `[host]:port` (plain, wildcard or hashed `|1|` entries; `@revoked`
  honoured, `@cert-authority` ignored). libgit2's own `~/.ssh/known_hosts` verdict is not used.
* TLS (`tls`): without a CA in the Secret, libgit2's verdict against the system CAs stands; with
  one, the server certificate must chain to that CA and name the host (the system CAs then no
  longer count, as with git's `http.sslCAInfo`).
* A rejected credential is never offered twice (libgit2 would ask again forever).

pygit2 hands `certificate_check` too little to check a server by; `libgit2_certs` reads what
libgit2 passed. `errors.classify_git_error` turns any transport failure into a stable
`GitFailure` reason and a message that holds no credentials.

Modules import downwards only: callbacks → secret → known_hosts | libgit2_certs | tls → errors.
"""
