package lockraft

import (
	"crypto/subtle"
	"crypto/x509"
	"net/http"
	"strings"

	"github.com/lockraft/lockraft/transport"
)

// OperatorAuth says who is an operator of the admin handler
// (WithOperatorAuth): the holder of a client certificate that chains to
// Roots and names an operator of ClusterID (lockraft-certs operator, or a
// member certificate whose role includes operator), or a client that sends
// one of Tokens as "Authorization: Bearer <token>".
type OperatorAuth struct {
	// ClusterID is the cluster an operator certificate must name.
	ClusterID string
	// Roots returns the CAs an operator certificate must chain to (the
	// cluster's CA); nil accepts no certificate. The handler verifies the
	// chain itself, whatever the serving http.Server's TLS config trusts.
	Roots func() (*x509.CertPool, error)
	// Tokens returns the bearer tokens accepted, asked on every request (so
	// they rotate without a restart); nil accepts none. Empty tokens never
	// match.
	Tokens func() []string
}

// WithOperatorAuth makes the handler serve only operators: every request
// but /healthz and /readyz (the orchestrator's probes) must come from one
// (OperatorAuth), or is answered 401. The views name lock owners and
// members, so they are an operator's too. Operator actions still need
// WithOperatorActions. A client certificate reaches the handler only if the
// serving http.Server asks for one (tls.Config.ClientAuth
// RequestClientCert or stronger); tokens need TLS too, or anyone on the
// path reads them.
func WithOperatorAuth(a OperatorAuth) AdminOption {
	return func(c *adminConfig) { c.auth = &a }
}

// operator reports whether r comes from an operator, and if not why.
func (a *OperatorAuth) operator(r *http.Request) (bool, string) {
	why := "no client certificate and no bearer token"
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if a.Tokens != nil && tok != "" {
			for _, want := range a.Tokens() {
				if want != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(want)) == 1 {
					return true, ""
				}
			}
		}
		why = "unknown bearer token"
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return false, why
	}
	if a.Roots == nil {
		return false, "client certificates are not accepted here"
	}
	roots, err := a.Roots()
	if err != nil {
		return false, "no roots to verify the client certificate"
	}
	certs := r.TLS.PeerCertificates
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return false, "client certificate: " + err.Error()
	}
	id, err := transport.ParseIdentity(certs[0])
	switch {
	case err != nil:
		return false, err.Error()
	case id.Cluster != a.ClusterID:
		return false, "client certificate of another cluster"
	case !id.Role.Operator():
		return false, "client certificate without the operator role"
	}
	return true, ""
}
