// Command lockraft-certs makes the certificates of a lockraft cluster: a CA,
// and for each member a certificate naming it with the URI SAN
// lockraft://<cluster>/<raft-id>, usable for both sides of mutual TLS.
//
//	lockraft-certs ca -dir certs                       # certs/ca.pem, certs/ca-key.pem
//	lockraft-certs member -dir certs -cluster orders-prod -id 1 -host 10.0.0.1
//	                                                   # certs/member-1.pem, certs/member-1-key.pem
//	lockraft-certs member -dir certs -cluster orders-prod -id random
//	                                                   # a gossip member: prints the random id
//
// Give each member ca.pem and its own pair (lockraft.WithTLSFiles). Keep
// ca-key.pem offline: whoever has it can mint any member. To rotate a
// member's certificate, issue a new one for the same id and replace the
// files: members read them again within a second. To rotate the CA, make a
// new one, put both CA certificates in every member's ca.pem, reissue every
// member's certificate from the new CA, then drop the old CA from ca.pem.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockraft/lockraft/internal/certgen"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "lockraft-certs:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: lockraft-certs ca|member [flags] (-h for flags)")
	}
	switch args[0] {
	case "ca":
		fs := flag.NewFlagSet("ca", flag.ContinueOnError)
		dir := fs.String("dir", ".", "directory for ca.pem and ca-key.pem")
		name := fs.String("name", "lockraft cluster CA", "the CA's common name")
		days := fs.Int("days", 3650, "validity in days")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		ca, err := certgen.NewCA(*name, time.Now().Add(-time.Hour), time.Now().AddDate(0, 0, *days))
		if err != nil {
			return err
		}
		if err := write(*dir, "ca.pem", ca.CertPEM, 0o644); err != nil {
			return err
		}
		return write(*dir, "ca-key.pem", ca.KeyPEM, 0o600)
	case "member":
		fs := flag.NewFlagSet("member", flag.ContinueOnError)
		dir := fs.String("dir", ".", "directory holding ca.pem and ca-key.pem; the member's files go here too")
		cluster := fs.String("cluster", "", "cluster id (lockraft.WithClusterID); a DNS-style name")
		idFlag := fs.String("id", "", `raft id: the member's 1-based position in the static peer list, or "random" for gossip`)
		hosts := fs.String("host", "", "extra SANs, comma-separated DNS names or IPs (optional)")
		days := fs.Int("days", 365, "validity in days")
		out := fs.String("name", "", `file name prefix (default "member-<id>")`)
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *cluster == "" || *idFlag == "" {
			return errors.New("member needs -cluster and -id")
		}
		id := certgen.RandomID()
		if *idFlag != "random" {
			var err error
			if id, err = strconv.ParseUint(*idFlag, 10, 64); err != nil || id == 0 {
				return fmt.Errorf("bad -id %q", *idFlag)
			}
		}
		certPEM, err := os.ReadFile(filepath.Join(*dir, "ca.pem"))
		if err != nil {
			return err
		}
		keyPEM, err := os.ReadFile(filepath.Join(*dir, "ca-key.pem"))
		if err != nil {
			return err
		}
		ca, err := certgen.LoadCA(certPEM, keyPEM)
		if err != nil {
			return err
		}
		var hs []string
		if *hosts != "" {
			hs = strings.Split(*hosts, ",")
		}
		cert, key, err := ca.Member(*cluster, id, hs, time.Now().Add(-time.Hour), time.Now().AddDate(0, 0, *days))
		if err != nil {
			return err
		}
		prefix := *out
		if prefix == "" {
			prefix = fmt.Sprintf("member-%d", id)
		}
		if err := write(*dir, prefix+".pem", cert, 0o644); err != nil {
			return err
		}
		if err := write(*dir, prefix+"-key.pem", key, 0o600); err != nil {
			return err
		}
		fmt.Printf("member %d of %s: %s\n", id, *cluster, certgen.MemberURI(*cluster, id))
		return nil
	}
	return fmt.Errorf("unknown command %q (ca or member)", args[0])
}

// write writes a file atomically (a temporary file renamed over it), so a
// member reading its files never sees half of one.
func write(dir, name string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	fmt.Println("wrote", filepath.Join(dir, name))
	return nil
}
