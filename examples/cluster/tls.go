package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/internal/certgen"
)

// maybeCerts makes, with -tls, a CA and a certificate for each node under
// tmp/certs (as cmd/lockraft-certs would) and returns that directory; ""
// without -tls.
func maybeCerts(tmp string) (string, error) {
	if !*flagTLS {
		return "", nil
	}
	dir := filepath.Join(tmp, "certs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	ca, err := certgen.NewCA("examples CA", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.CertPEM, 0o600); err != nil {
		return "", err
	}
	for id := uint64(1); id <= uint64(flagNodes); id++ {
		cert, key, err := ca.Member(clusterID, id, []string{"127.0.0.1"}, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("member-%016x.pem", id)), cert, 0o600); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("member-%016x-key.pem", id)), key, 0o600); err != nil {
			return "", err
		}
	}
	fmt.Printf("mutual TLS: CA and member certificates (%s) in %s\n", certgen.MemberURI(clusterID, 1), dir)
	return dir, nil
}

// tlsOption is node id's mutual TLS from the files maybeCerts wrote.
func tlsOption(dir string, id uint64) lockraft.Option {
	return lockraft.WithTLSFiles(filepath.Join(dir, "ca.pem"),
		filepath.Join(dir, fmt.Sprintf("member-%016x.pem", id)), filepath.Join(dir, fmt.Sprintf("member-%016x-key.pem", id)))
}
