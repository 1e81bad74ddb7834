//go:build tools

// Package tools pins the Helm command the chart is linted and installed with.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
