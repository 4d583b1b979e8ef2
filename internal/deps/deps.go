// Package deps pins module dependencies while packages are being written in
// parallel. It is removed once every dependency is imported for real.
package deps

import (
	_ "github.com/anishathalye/porcupine"
	_ "github.com/cockroachdb/datadriven"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/stretchr/testify/require"
	_ "go.etcd.io/bbolt"
	_ "go.etcd.io/raft/v3"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
)
