// Command lockraft-certs makes the certificates of a lockraft cluster: a CA,
// for each member a certificate naming it and its role with the URI SAN
// lockraft://<cluster>/<raft-id>?role=<role>, usable for both sides of
// mutual TLS, and operators' client certificates. The raft id is written,
// taken (-id) and shown in hex, 16 digits, as lockraftctl members shows it.
//
//	lockraft-certs ca -dir certs                       # certs/ca.pem, certs/ca-key.pem
//	lockraft-certs member -dir certs -cluster orders-prod -id 1 -role voter -host 10.0.0.1
//	                                                   # certs/member-0000000000000001.pem and -key.pem
//	lockraft-certs member -dir certs -cluster orders-prod -id random -role light
//	                                                   # a gossip member: prints the random id
//	lockraft-certs operator -dir certs -cluster orders-prod -name alice
//	                                                   # certs/operator-alice.pem: lockraftctl's client certificate
//	lockraft-certs reissue -dir certs -cert certs/member-0000000000000001.pem -role voter
//	                                                   # the same member (id, cluster, hosts) with a role
//	lockraft-certs show certs/member-0000000000000001.pem
//	                                                   # what a certificate names
//
// The role is chosen when a certificate is issued, and there is no default:
// voter (may be a raft participant: learner, voter, standby), light (opens
// its own sessions and locks through forwarding; never a raft participant),
// either with ",operator" added (may ask for operator actions: leadership
// transfer, member removal). A certificate issued before roles is read as
// light: reissue the voters' certificates with -role voter (and rotate them
// in place, members read their files again within a second) before
// upgrading a cluster to a version with roles; older versions accept the new
// certificates, as reissue keeps the id as the certificate has it.
//
// Certificates issued by earlier versions name the member in decimal
// (lockraft://orders-prod/1), which this version still reads but earlier
// ones read only that way. reissue keeps that form, so that it serves a
// cluster not yet upgraded; reissue -hex writes the hex form, for members
// that all run this version or a later one.
//
// Give each member ca.pem and its own pair (lockraft.WithTLSFiles). Keep
// ca-key.pem offline: whoever has it can mint any member. To rotate a
// member's certificate, issue a new one for the same id and replace the
// files. To rotate the CA, make a new one, put both CA certificates in every
// member's ca.pem, reissue every member's certificate from the new CA, then
// drop the old CA from ca.pem. To revoke a certificate, add its serial (show
// prints it) to the members' deny-list file.
package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockraft/lockraft/internal/certgen"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/transport"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lockraft-certs:", err)
		os.Exit(1)
	}
}

const roleHelp = `the member's role: voter, light, voter,operator or light,operator (required)`

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: lockraft-certs ca|member|operator|reissue|show [flags] (-h for flags)")
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
		if err := write(out, *dir, "ca.pem", ca.CertPEM, 0o644); err != nil {
			return err
		}
		return write(out, *dir, "ca-key.pem", ca.KeyPEM, 0o600)
	case "member":
		fs := flag.NewFlagSet("member", flag.ContinueOnError)
		dir := fs.String("dir", ".", "directory holding ca.pem and ca-key.pem; the member's files go here too")
		cluster := fs.String("cluster", "", "cluster id (lockraft.WithClusterID); a DNS-style name")
		idFlag := fs.String("id", "", `raft id in hex, as lockraftctl members shows it: the member's 1-based position in the static peer list (the 10th is a), or "random" for gossip`)
		role := fs.String("role", "", roleHelp)
		hosts := fs.String("host", "", "extra SANs, comma-separated DNS names or IPs (optional)")
		days := fs.Int("days", 365, "validity in days")
		name := fs.String("name", "", `file name prefix (default "member-<id in hex>")`)
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *cluster == "" || *idFlag == "" || *role == "" {
			return errors.New("member needs -cluster, -id and -role")
		}
		id := certgen.RandomID()
		if *idFlag != "random" {
			v, err := views.ParseMemberID(*idFlag)
			if err != nil || transport.ReservedID(uint64(v)) {
				return fmt.Errorf("bad -id %q: want a raft id in hex, as lockraftctl members shows it", *idFlag)
			}
			id = uint64(v)
		}
		var hs []string
		if *hosts != "" {
			hs = strings.Split(*hosts, ",")
		}
		return issueMember(out, *dir, *name, *cluster, id, *role, hs, *days, false)
	case "operator":
		fs := flag.NewFlagSet("operator", flag.ContinueOnError)
		dir := fs.String("dir", ".", "directory holding ca.pem and ca-key.pem; the operator's files go here too")
		cluster := fs.String("cluster", "", "cluster id (lockraft.WithClusterID); a DNS-style name")
		name := fs.String("name", "", "the operator's name: 1 to 64 letters, digits, '.', '_', '-'")
		days := fs.Int("days", 30, "validity in days")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *cluster == "" || !transport.ValidOperatorName(*name) {
			return errors.New("operator needs -cluster and -name (1 to 64 letters, digits, '.', '_', '-')")
		}
		if err := transport.ValidateClusterID(*cluster); err != nil {
			return err
		}
		ca, err := loadCA(*dir)
		if err != nil {
			return err
		}
		cert, key, err := ca.Operator(*cluster, *name, time.Now().Add(-time.Hour), time.Now().AddDate(0, 0, *days))
		if err != nil {
			return err
		}
		return writePair(out, *dir, "operator-"+*name, cert, key, transport.OperatorURI(*cluster, *name))
	case "reissue":
		fs := flag.NewFlagSet("reissue", flag.ContinueOnError)
		dir := fs.String("dir", ".", "directory holding ca.pem and ca-key.pem; the new files go here too")
		certFile := fs.String("cert", "", "the member's current certificate (PEM)")
		role := fs.String("role", "", roleHelp)
		days := fs.Int("days", 365, "validity in days")
		name := fs.String("name", "", `file name prefix (default: the current certificate's, e.g. "member-0000000000000003")`)
		hex := fs.Bool("hex", false, "name the member in hex even if the current certificate has it in decimal "+
			"(what versions before the hex form issued, and all they read): once every member runs this version")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *certFile == "" || *role == "" {
			return errors.New("reissue needs -cert and -role")
		}
		old, err := readCert(*certFile)
		if err != nil {
			return err
		}
		ident, err := transport.ParseIdentity(old)
		if err != nil {
			return err
		}
		if ident.ID == 0 {
			return fmt.Errorf("%s names operator %q, not a member: issue a new one with the operator command", *certFile, ident.Operator)
		}
		hs := append([]string(nil), old.DNSNames...)
		for _, ip := range old.IPAddresses {
			hs = append(hs, ip.String())
		}
		prefix := *name
		if prefix == "" {
			prefix = strings.TrimSuffix(filepath.Base(*certFile), ".pem")
		}
		return issueMember(out, *dir, prefix, ident.Cluster, ident.ID, *role, hs, *days, !*hex && decimalID(old))
	case "show":
		if len(args) != 2 {
			return errors.New("usage: lockraft-certs show CERT.pem")
		}
		cert, err := readCert(args[1])
		if err != nil {
			return err
		}
		ident, err := transport.ParseIdentity(cert)
		if err != nil {
			return err
		}
		who := "member " + views.MemberID(ident.ID).String()
		if ident.ID == 0 {
			who = "operator " + ident.Operator
		}
		_, err = fmt.Fprintf(out, "%s of %s, role %s\nserial %s\nvalid %s to %s\n", who, ident.Cluster, ident.Role,
			transport.SerialString(cert.SerialNumber), cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339))
		return err
	}
	return fmt.Errorf("unknown command %q (ca, member, operator, reissue or show)", args[0])
}

// issueMember issues member id's certificate with role into dir, the id in
// hex, or in decimal (as earlier versions wrote and read it) if decimal.
func issueMember(out io.Writer, dir, prefix, cluster string, id uint64, role string, hosts []string, days int, decimal bool) error {
	r, err := transport.ParseRole(role)
	if err != nil || !r.Member() {
		return fmt.Errorf("bad -role %q: %s", role, roleHelp)
	}
	if err := transport.ValidateClusterID(cluster); err != nil {
		return err
	}
	ca, err := loadCA(dir)
	if err != nil {
		return err
	}
	uri := transport.MemberRoleURI(cluster, id, r)
	if decimal {
		uri = certgen.DecimalMemberRoleURI(cluster, id, r.String())
	}
	u, err := url.Parse(uri)
	if err != nil {
		return err
	}
	cert, key, err := ca.Issue(certgen.CommonName(r.String(), id), []*url.URL{u}, hosts, time.Now().Add(-time.Hour), time.Now().AddDate(0, 0, days))
	if err != nil {
		return err
	}
	if prefix == "" {
		prefix = "member-" + views.MemberID(id).String()
	}
	return writePair(out, dir, prefix, cert, key, uri)
}

// decimalID reports whether cert names its member in decimal, as
// certificates issued before the hex form do (exactly 16 digits is hex:
// see transport's identity.go).
func decimalID(cert *x509.Certificate) bool {
	for _, u := range cert.URIs {
		if u.Scheme == transport.MemberScheme {
			return len(strings.TrimPrefix(u.Path, "/")) != 16
		}
	}
	return false
}

func loadCA(dir string) (*certgen.CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return nil, err
	}
	return certgen.LoadCA(certPEM, keyPEM)
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	return x509.ParseCertificate(blk.Bytes)
}

// writePair writes prefix.pem and prefix-key.pem and says what they name.
func writePair(out io.Writer, dir, prefix string, cert, key []byte, uri string) error {
	if err := write(out, dir, prefix+".pem", cert, 0o644); err != nil {
		return err
	}
	if err := write(out, dir, prefix+"-key.pem", key, 0o600); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out, "names", uri)
	return err
}

// write writes a file atomically (a temporary file renamed over it), so a
// member reading its files never sees half of one.
func write(out io.Writer, dir, name string, b []byte, mode os.FileMode) error {
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
	_, err := fmt.Fprintln(out, "wrote", filepath.Join(dir, name))
	return err
}
