package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	grpcpeer "google.golang.org/grpc/peer"
)

// TLS is the transport's mutual TLS. Both functions are called on every
// handshake (new connections only; established ones keep their session), so
// replacing what they return rotates certificates and CAs without a restart.
// They must be safe for concurrent use and fast (cache; do not read files on
// every call: see TLSFiles).
//
// Every member presents a certificate chaining to Roots and naming it
// (MemberURI); a server accepts only clients of its cluster, and a client
// accepts only the server that names the member id it dialled. Host names
// and IPs in the certificates play no part: peers are found by gossip or a
// static list, and the identity that matters is the member id.
type TLS struct {
	// Roots returns the CAs a peer's certificate must chain to. During a CA
	// rotation return a pool holding both the old and the new CA.
	Roots func() (*x509.CertPool, error)
	// Certificate returns this member's certificate (with its chain) and
	// key. It must name this member: LocalID of Config.ClusterID.
	Certificate func() (*tls.Certificate, error)
}

func (c *TLS) validate(cluster string, local uint64) error {
	if c.Roots == nil || c.Certificate == nil {
		return errors.New("TLS needs both Roots and Certificate")
	}
	if err := ValidateClusterID(cluster); err != nil {
		return err
	}
	cert, err := c.Certificate()
	if err != nil {
		return fmt.Errorf("TLS certificate: %w", err)
	}
	leaf, err := leafOf(cert)
	if err != nil {
		return err
	}
	gotCluster, id, err := MemberIdentity(leaf)
	if err != nil {
		return err
	}
	if gotCluster != cluster || id != local {
		return fmt.Errorf("%w: this member's certificate names member %016x of cluster %q, not %016x of %q",
			errIdentity, id, gotCluster, local, cluster)
	}
	if _, err := c.Roots(); err != nil {
		return fmt.Errorf("TLS roots: %w", err)
	}
	return nil
}

// identity returns what this member's own certificate says: its cluster,
// member id and role (a node checks that it may be what it is configured
// to be: a voter needs RoleVoter).
func (c *TLS) identity() (Identity, error) {
	cert, err := c.Certificate()
	if err != nil {
		return Identity{}, fmt.Errorf("TLS certificate: %w", err)
	}
	leaf, err := leafOf(cert)
	if err != nil {
		return Identity{}, err
	}
	return ParseIdentity(leaf)
}

func leafOf(cert *tls.Certificate) (*x509.Certificate, error) {
	if cert == nil || len(cert.Certificate) == 0 {
		return nil, errors.New("TLS certificate is empty")
	}
	if cert.Leaf != nil {
		return cert.Leaf, nil
	}
	return x509.ParseCertificate(cert.Certificate[0])
}

// verifyPeer checks a peer's certificate chain against the current roots for
// usage and returns the identity it carries. Clients verify servers with it
// (crypto/tls's own verification wants a host name); servers let crypto/tls
// verify the chain (RequireAndVerifyClientCert) and only read the identity.
func (t *Transport) verifyPeer(certs []*x509.Certificate, usage x509.ExtKeyUsage) (Identity, error) {
	if len(certs) == 0 {
		return Identity{}, errors.New("peer presented no certificate")
	}
	roots, err := t.cfg.TLS.Roots()
	if err != nil {
		return Identity{}, fmt.Errorf("TLS roots: %w", err)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return Identity{}, err
	}
	return ParseIdentity(certs[0])
}

// admitIdentity is what a peer's verified certificate must say, in both
// directions: a member (not an operator that is no member) of this cluster,
// not on the deny-list; and, for a peer connecting here, not revoked. The
// role it carries is recorded (PeerRole).
func (t *Transport) admitIdentity(leaf *x509.Certificate, ident Identity, incoming bool) error {
	switch {
	case ident.Cluster != t.cfg.ClusterID:
		return fmt.Errorf("%w: the peer is of cluster %q, this is %q", errIdentity, ident.Cluster, t.cfg.ClusterID)
	case ident.ID == 0:
		return fmt.Errorf("%w: operator %q is no member", errIdentity, ident.Operator)
	}
	if why := t.deny.current().denies(leaf, ident.ID); why != "" {
		return fmt.Errorf("%w: member %016x: %s", errDenied, ident.ID, why)
	}
	if incoming && t.adm.isRevoked(ident.ID) {
		return fmt.Errorf("%w: member %016x was revoked", errDenied, ident.ID)
	}
	t.adm.roles.Store(ident.ID, ident.Role)
	return nil
}

// serverTLS is the server side: a client must present a certificate of this
// cluster's CA naming a member of this cluster that admitIdentity admits.
func (t *Transport) serverTLS() *tls.Config {
	c := t.cfg.TLS
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			roots, err := c.Roots()
			if err != nil {
				return nil, err
			}
			cert, err := c.Certificate()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				NextProtos:   []string{"h2"},
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    roots,
				ClientAuth:   tls.RequireAndVerifyClientCert,
				VerifyConnection: func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) == 0 {
						return errors.New("no client certificate")
					}
					ident, err := ParseIdentity(cs.PeerCertificates[0])
					if err != nil {
						return err
					}
					return t.admitIdentity(cs.PeerCertificates[0], ident, true)
				},
			}, nil
		},
	}
}

// clientTLS is the client side towards member id: the server must present a
// certificate of this cluster's CA naming exactly that member, not on the
// deny-list.
func (t *Transport) clientTLS(id uint64) *tls.Config {
	c := t.cfg.TLS
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain and the member identity are verified below; there is no
		// host name to verify (peers are addressed by member id).
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return c.Certificate()
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			ident, err := t.verifyPeer(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if ident.Cluster != t.cfg.ClusterID || ident.ID != id {
				return fmt.Errorf("%w: dialled member %016x of %q, the server is member %016x of %q",
					errIdentity, id, t.cfg.ClusterID, ident.ID, ident.Cluster)
			}
			return t.admitIdentity(cs.PeerCertificates[0], ident, false)
		},
	}
}

// peerAddr is the remote address of an incoming RPC, for logs.
func peerAddr(ctx context.Context) string {
	if pr, ok := grpcpeer.FromContext(ctx); ok && pr.Addr != nil {
		return hostOf(pr.Addr)
	}
	return "unknown"
}

func hostOf(a net.Addr) string {
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// TLSFiles returns a TLS that reads PEM files: caFile (one or more CA
// certificates), certFile (this member's certificate, then any
// intermediates) and keyFile. They are read now (an error is returned if
// they are unusable) and read again when their size or modification time
// changes, checked at most once a second, so replacing the files rotates the
// certificate or the CA without a restart. A replacement that cannot be
// parsed (e.g. half written) is ignored until it can; the last good material
// keeps being used meanwhile.
func TLSFiles(caFile, certFile, keyFile string) (*TLS, error) {
	f := &fileTLS{ca: caFile, cert: certFile, key: keyFile}
	if err := f.load(); err != nil {
		return nil, err
	}
	return &TLS{Roots: f.roots, Certificate: f.certificate}, nil
}

// fileTLSCheck is how often TLSFiles looks at the files.
const fileTLSCheck = time.Second

type fileTLS struct {
	ca, cert, key string

	mu      sync.Mutex
	checked time.Time
	stamp   []byte // size and mtime of the three files at the last load
	pool    *x509.CertPool
	pair    *tls.Certificate
}

func (f *fileTLS) roots() (*x509.CertPool, error) {
	f.refresh()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pool, nil
}

func (f *fileTLS) certificate() (*tls.Certificate, error) {
	f.refresh()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pair, nil
}

func (f *fileTLS) refresh() {
	f.mu.Lock()
	due := time.Since(f.checked) >= fileTLSCheck
	if due {
		f.checked = time.Now()
	}
	f.mu.Unlock()
	if due {
		_ = f.load() // keep the last good material
	}
}

func (f *fileTLS) load() error {
	var stamp []byte
	for _, p := range []string{f.ca, f.cert, f.key} {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		stamp = fmt.Appendf(stamp, "%d/%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	f.mu.Lock()
	same := bytes.Equal(stamp, f.stamp)
	f.mu.Unlock()
	if same {
		return nil
	}
	caPEM, err := os.ReadFile(f.ca)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("TLS: %s holds no PEM certificate", f.ca)
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return fmt.Errorf("TLS: %w", err)
	}
	f.mu.Lock()
	f.pool, f.pair, f.stamp = pool, &pair, stamp
	f.mu.Unlock()
	return nil
}
