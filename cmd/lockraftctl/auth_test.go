package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/internal/certgen"
)

// TestCtlAsOperator: against an admin handler that serves only operators
// (over https, asking for client certificates), lockraftctl gets in with an
// operator's certificate or a bearer token, from a file or the
// environment, and is told why not with a member's certificate without the
// operator role or with nothing; the probes stay open; a token is never
// sent over plain http off loopback.
func TestCtlAsOperator(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := certgen.NewCA("ca", now.Add(-time.Hour), now.Add(time.Hour))
	require.NoError(t, err)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	caFile := write("ca.pem", ca.CertPEM)
	pair := func(name string) func(certPEM, keyPEM []byte, err error) (string, string) {
		return func(certPEM, keyPEM []byte, err error) (string, string) {
			require.NoError(t, err)
			return write(name+".pem", certPEM), write(name+"-key.pem", keyPEM)
		}
	}
	opCert, opKey := pair("operator-alice")(ca.Operator("orders", "alice", now.Add(-time.Hour), now.Add(time.Hour)))
	voterCert, voterKey := pair("member-3")(ca.MemberRole("orders", 3, "voter", nil, now.Add(-time.Hour), now.Add(time.Hour)))
	tokenFile := write("token", []byte("s3cret\n"))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	n, err := lockraft.Join([]string{ln.Addr().String()}, lockraft.WithDataDir(filepath.Join(dir, "data")),
		lockraft.WithListener(ln), lockraft.WithListenAddr(ln.Addr().String()))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	srvCert, srvKey, err := ca.Issue("admin", nil, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour))
	require.NoError(t, err)
	srvPair, err := tls.X509KeyPair(srvCert, srvKey)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(n.AdminHandler(lockraft.WithOperatorAuth(lockraft.OperatorAuth{
		ClusterID: "orders",
		Roots:     func() (*x509.CertPool, error) { return ca.Pool(), nil },
		Tokens:    func() []string { return []string{"s3cret"} },
	})))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{srvPair}, ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ep := srv.URL
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, n.Ready(ctx))

	code, out, errs := ctl("-endpoint", ep, "-cacert", caFile, "-cert", opCert, "-key", opKey, "status")
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "ready    yes")
	code, _, errs = ctl("-endpoint", ep, "-cacert", caFile, "-token-file", tokenFile, "status")
	require.Equal(t, exitOK, code, errs)
	t.Setenv("LOCKRAFT_TOKEN", "s3cret")
	code, _, errs = ctl("-endpoint", ep, "-cacert", caFile, "members")
	require.Equal(t, exitOK, code, errs)
	t.Setenv("LOCKRAFT_TOKEN", "")

	code, _, errs = ctl("-endpoint", ep, "-cacert", caFile, "-cert", voterCert, "-key", voterKey, "status")
	require.Equal(t, exitServerError, code)
	require.Contains(t, errs, "without the operator role")
	code, _, errs = ctl("-endpoint", ep, "-cacert", caFile, "status")
	require.Equal(t, exitServerError, code)
	require.Contains(t, errs, "HTTP 401")
	require.Contains(t, errs, "-token-file")
	code, _, errs = ctl("-endpoint", ep, "status") // the server's CA is not the system's
	require.Equal(t, exitUnreachable, code, errs)

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	resp, err := client.Get(ep + lockraft.AdminHealthPath)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "probes stay open")

	t.Setenv("LOCKRAFT_TOKEN", "s3cret")
	code, _, errs = ctl("-endpoint", "http://192.0.2.1:8080", "status")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, "refusing to send a bearer token over plain http")
	code, _, errs = ctl("-endpoint", ep, "-cert", opCert, "status")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, "-cert and -key go together")
}
