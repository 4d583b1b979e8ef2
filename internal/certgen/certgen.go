// Package certgen makes the certificates of a lockraft cluster: a CA and,
// for each member, a certificate naming it and its role
// (transport.MemberRoleURI, lockraft://<cluster>/<id>?role=voter) valid for
// both sides of mutual TLS, and operators' client certificates
// (transport.OperatorURI). It backs cmd/lockraft-certs, the examples and
// the tests; production PKIs can mint the same certificates with their own
// tools (see docs/security.md).
package certgen

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lockraft/lockraft/internal/views"
)

// CA is a certificate authority: its certificate and key.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed CA valid from notBefore to notAfter.
func NewCA(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	return fromDER(der, key)
}

// LoadCA reads a CA written by WriteFiles (or any PEM certificate and PKCS#8
// key pair).
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("certgen: CA files are not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("certgen: CA key cannot sign")
	}
	return fromDER(cb.Bytes, signer)
}

func fromDER(der []byte, key crypto.Signer) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}, nil
}

// Member issues the certificate of voter-capable member id of cluster (what
// the tests and examples run their raft members with), valid from notBefore
// to notAfter, with hosts (DNS names or IPs) as extra SANs. It returns the
// certificate and key in PEM. MemberRole chooses the role.
func (ca *CA) Member(cluster string, id uint64, hosts []string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	return ca.MemberRole(cluster, id, "voter", hosts, notBefore, notAfter)
}

// MemberRole issues the certificate of member id of cluster with role as
// the URI carries it: "voter" or "light", optionally with ",operator".
func (ca *CA) MemberRole(cluster string, id uint64, role string, hosts []string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	if err := checkRole(role); err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(MemberRoleURI(cluster, id, role))
	if err != nil {
		return nil, nil, err
	}
	return ca.Issue(CommonName(role, id), []*url.URL{u}, hosts, notBefore, notAfter)
}

// CommonName is the subject common name of member id's certificate with
// role: informative only (the URI SAN is the identity), the id in hex as
// the URI has it.
func CommonName(role string, id uint64) string {
	return fmt.Sprintf("lockraft %s %s", role, views.MemberID(id))
}

// Operator issues the client certificate of operator name (1 to 64
// letters, digits, '.', '_', '-') of cluster: no member, role operator. It
// is what lockraftctl presents to an admin handler that checks operators.
func (ca *CA) Operator(cluster, name string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	u, err := url.Parse(OperatorURI(cluster, name))
	if err != nil {
		return nil, nil, err
	}
	return ca.Issue("lockraft operator "+name, []*url.URL{u}, nil, notBefore, notAfter)
}

// Issue signs a leaf certificate for both server and client use with the
// given URIs and hosts as SANs. Member is what a cluster needs; Issue lets
// tests make certificates that are wrong on purpose.
func (ca *CA) Issue(name string, uris []*url.URL, hosts []string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         uris,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// Pool returns a pool holding the CA certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Material returns the two functions of a transport.TLS (roots and
// certificate) for this CA and the given certificate: for tests and
// in-process examples.
func (ca *CA) Material(certPEM, keyPEM []byte) (func() (*x509.CertPool, error), func() (*tls.Certificate, error), error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	pool := ca.Pool()
	return func() (*x509.CertPool, error) { return pool, nil },
		func() (*tls.Certificate, error) { return &pair, nil }, nil
}

// RandomID returns a random member id usable with gossip: non-zero and below
// 2^63, so never one of raft's reserved ids.
func RandomID() uint64 {
	for {
		n, err := rand.Int(rand.Reader, new(big.Int).SetUint64(1<<63))
		if err == nil && n.Uint64() != 0 {
			return n.Uint64()
		}
	}
}

// MemberURI, MemberRoleURI and OperatorURI are transport's (kept here so
// that the transport's own tests can use this package;
// TestMemberCertificateNamesMember keeps them equal).
func MemberURI(cluster string, id uint64) string {
	return (&url.URL{Scheme: "lockraft", Host: cluster, Path: "/" + views.MemberID(id).String()}).String()
}

func MemberRoleURI(cluster string, id uint64, role string) string {
	return (&url.URL{Scheme: "lockraft", Host: cluster, Path: "/" + views.MemberID(id).String(), RawQuery: "role=" + role}).String()
}

// DecimalMemberRoleURI is MemberRoleURI with the id in decimal, as
// certificates issued before the hex form name their member (and as
// members of those versions read it); transport still reads it.
func DecimalMemberRoleURI(cluster string, id uint64, role string) string {
	return (&url.URL{Scheme: "lockraft", Host: cluster, Path: "/" + strconv.FormatUint(id, 10), RawQuery: "role=" + role}).String()
}

func OperatorURI(cluster, name string) string {
	return (&url.URL{Scheme: "lockraft", Host: cluster, Path: "/operator/" + name, RawQuery: "role=operator"}).String()
}

// Roles lists the roles a member certificate may carry, as the URI writes
// them (transport.Role's String).
var Roles = []string{"voter", "light", "voter,operator", "light,operator"}

// checkRole reports whether role is one of Roles.
func checkRole(role string) error {
	for _, r := range Roles {
		if r == role {
			return nil
		}
	}
	return fmt.Errorf("certgen: role %q: want one of %s", role, strings.Join(Roles, ", "))
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
