// Package transportpb holds the generated gRPC service used between lockraft
// nodes. Regenerate with `go generate ./transport/transportpb` (needs protoc,
// protoc-gen-go v1.36.12 and protoc-gen-go-grpc on PATH); CI uses the
// committed files.
package transportpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative transport.proto
