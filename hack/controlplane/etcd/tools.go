//go:build tools

// Package tools pins the etcd server the test control plane is built from.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
