package certgen_test

import (
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/certgen"
	"github.com/lockraft/lockraft/transport"
)

// A member certificate names its member the way the transport reads it, is
// signed by the CA and serves both sides of mutual TLS.
func TestMemberCertificateNamesMember(t *testing.T) {
	require.Equal(t, transport.MemberURI("orders-prod", 7), certgen.MemberURI("orders-prod", 7))
	ca, err := certgen.NewCA("ca", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.NoError(t, err)
	certPEM, _, err := ca.Member("orders-prod", 7, []string{"10.0.0.7", "n7.example"}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.NoError(t, err)
	b, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	cluster, id, err := transport.MemberIdentity(cert)
	require.NoError(t, err)
	require.Equal(t, "orders-prod", cluster)
	require.Equal(t, uint64(7), id)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		_, err = cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{u}})
		require.NoError(t, err)
	}
	again, err := certgen.LoadCA(ca.CertPEM, ca.KeyPEM)
	require.NoError(t, err)
	require.True(t, again.Cert.Equal(ca.Cert))
	require.NotZero(t, certgen.RandomID())
}
