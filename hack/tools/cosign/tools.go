//go:build tools

package tools

import _ "github.com/sigstore/cosign/v2/cmd/cosign"
