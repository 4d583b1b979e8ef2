package lockraft

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/certgen"
)

// Who WithOperatorAuth lets in: an operator certificate of this cluster's
// CA (an operator identity, or a member whose role includes operator), or
// a known bearer token; not a member without the operator role, another
// cluster's operator, another CA's, an unknown or empty token, or nobody.
func TestOperatorAuth(t *testing.T) {
	now := time.Now()
	ca, err := certgen.NewCA("ca", now.Add(-time.Hour), now.Add(time.Hour))
	require.NoError(t, err)
	other, err := certgen.NewCA("other", now.Add(-time.Hour), now.Add(time.Hour))
	require.NoError(t, err)
	leaf := func(certPEM, keyPEM []byte, err error) *x509.Certificate {
		require.NoError(t, err)
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		require.NoError(t, err)
		return pair.Leaf
	}
	tokens := []string{"", "s3cret"}
	auth := &OperatorAuth{ClusterID: "orders", Roots: func() (*x509.CertPool, error) { return ca.Pool(), nil },
		Tokens: func() []string { return tokens }}
	req := func(cert *x509.Certificate, token string) *http.Request {
		r := httptest.NewRequest("GET", "/status", nil)
		if cert != nil {
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
		}
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r
	}
	for name, c := range map[string]struct {
		r  *http.Request
		ok bool
	}{
		"operator":             {req(leaf(ca.Operator("orders", "alice", now.Add(-time.Hour), now.Add(time.Hour))), ""), true},
		"member with operator": {req(leaf(ca.MemberRole("orders", 3, "voter,operator", nil, now.Add(-time.Hour), now.Add(time.Hour))), ""), true},
		"token":                {req(nil, "s3cret"), true},
		"bad token, good cert": {req(leaf(ca.Operator("orders", "alice", now.Add(-time.Hour), now.Add(time.Hour))), "nope"), true},
		"voter":                {req(leaf(ca.Member("orders", 3, nil, now.Add(-time.Hour), now.Add(time.Hour))), ""), false},
		"another cluster":      {req(leaf(ca.Operator("billing", "alice", now.Add(-time.Hour), now.Add(time.Hour))), ""), false},
		"another CA":           {req(leaf(other.Operator("orders", "alice", now.Add(-time.Hour), now.Add(time.Hour))), ""), false},
		"expired":              {req(leaf(ca.Operator("orders", "alice", now.Add(-2*time.Hour), now.Add(-time.Hour))), ""), false},
		"unknown token":        {req(nil, "S3cret"), false},
		"empty token":          {req(nil, " "), false},
		"nobody":               {req(nil, ""), false},
	} {
		ok, why := auth.operator(c.r)
		require.Equal(t, c.ok, ok, "%s: %s", name, why)
	}
	noCerts := &OperatorAuth{ClusterID: "orders", Tokens: func() []string { return tokens }}
	ok, _ := noCerts.operator(req(leaf(ca.Operator("orders", "alice", now.Add(-time.Hour), now.Add(time.Hour))), ""))
	require.False(t, ok)
}
