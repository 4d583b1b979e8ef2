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

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return cert
}

// A member certificate names its member and role the way the transport
// reads them, is signed by the CA and serves both sides of mutual TLS.
func TestMemberCertificateNamesMember(t *testing.T) {
	require.Equal(t, transport.MemberURI("orders-prod", 7), certgen.MemberURI("orders-prod", 7))
	for _, r := range []transport.Role{transport.RoleVoter, transport.RoleLight,
		transport.RoleVoter | transport.RoleOperator, transport.RoleLight | transport.RoleOperator} {
		require.Equal(t, transport.MemberRoleURI("orders-prod", 7, r), certgen.MemberRoleURI("orders-prod", 7, r.String()))
		require.Contains(t, certgen.Roles, r.String())
	}
	require.Len(t, certgen.Roles, 4)
	require.Equal(t, transport.OperatorURI("orders-prod", "alice"), certgen.OperatorURI("orders-prod", "alice"))

	ca, err := certgen.NewCA("ca", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.NoError(t, err)
	certPEM, _, err := ca.Member("orders-prod", 7, []string{"10.0.0.7", "n7.example"}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.NoError(t, err)
	cert := parse(t, certPEM)
	id, err := transport.ParseIdentity(cert)
	require.NoError(t, err)
	require.Equal(t, transport.Identity{Cluster: "orders-prod", ID: 7, Role: transport.RoleVoter}, id)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		_, err = cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{u}})
		require.NoError(t, err)
	}

	certPEM, _, err = ca.MemberRole("orders-prod", 8, "light,operator", nil, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.NoError(t, err)
	id, err = transport.ParseIdentity(parse(t, certPEM))
	require.NoError(t, err)
	require.Equal(t, transport.Identity{Cluster: "orders-prod", ID: 8, Role: transport.RoleLight | transport.RoleOperator}, id)
	_, _, err = ca.MemberRole("orders-prod", 8, "admin", nil, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.Error(t, err)

	certPEM, _, err = ca.Operator("orders-prod", "alice", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	require.NoError(t, err)
	id, err = transport.ParseIdentity(parse(t, certPEM))
	require.NoError(t, err)
	require.Equal(t, transport.Identity{Cluster: "orders-prod", Operator: "alice", Role: transport.RoleOperator}, id)

	again, err := certgen.LoadCA(ca.CertPEM, ca.KeyPEM)
	require.NoError(t, err)
	require.True(t, again.Cert.Equal(ca.Cert))
	require.NotZero(t, certgen.RandomID())
}
