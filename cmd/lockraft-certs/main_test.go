package main

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/transport"
)

func identityOf(t *testing.T, path string) transport.Identity {
	t.Helper()
	cert, err := readCert(path)
	require.NoError(t, err)
	id, err := transport.ParseIdentity(cert)
	require.NoError(t, err)
	return id
}

// Each role is issued on request and never by default; an operator gets a
// client certificate that is no member; a certificate issued before roles
// (read as light) is reissued with a role, keeping its id, cluster and
// host names; show prints what a certificate names and its serial.
func TestIssueEachRole(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	require.NoError(t, run([]string{"ca", "-dir", dir}, &out))

	err := run([]string{"member", "-dir", dir, "-cluster", "orders-prod", "-id", "1"}, &out)
	require.ErrorContains(t, err, "-role")
	err = run([]string{"member", "-dir", dir, "-cluster", "orders-prod", "-id", "1", "-role", "admin"}, &out)
	require.ErrorContains(t, err, "bad -role")
	err = run([]string{"member", "-dir", dir, "-cluster", "orders-prod", "-id", "1", "-role", "operator"}, &out)
	require.ErrorContains(t, err, "bad -role")

	for id, role := range map[string]transport.Role{"1": transport.RoleVoter, "2": transport.RoleLight,
		"3": transport.RoleVoter | transport.RoleOperator} {
		require.NoError(t, run([]string{"member", "-dir", dir, "-cluster", "orders-prod", "-id", id, "-role", role.String(),
			"-host", "10.0.0." + id}, &out))
		got := identityOf(t, filepath.Join(dir, "member-"+id+".pem"))
		require.Equal(t, role, got.Role, id)
		require.Equal(t, "orders-prod", got.Cluster)
	}
	require.Contains(t, out.String(), transport.MemberRoleURI("orders-prod", 1, transport.RoleVoter))

	require.NoError(t, run([]string{"operator", "-dir", dir, "-cluster", "orders-prod", "-name", "alice"}, &out))
	require.Equal(t, transport.Identity{Cluster: "orders-prod", Operator: "alice", Role: transport.RoleOperator},
		identityOf(t, filepath.Join(dir, "operator-alice.pem")))
	require.Error(t, run([]string{"operator", "-dir", dir, "-cluster", "orders-prod", "-name", "a/b"}, &out))

	// A certificate from before roles: light until reissued.
	ca, err := loadCA(dir)
	require.NoError(t, err)
	u, _ := url.Parse(transport.MemberURI("orders-prod", 7))
	old, key, err := ca.Issue("old", []*url.URL{u}, []string{"n7.example", "10.0.0.7"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "member-7.pem"), old, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "member-7-key.pem"), key, 0o600))
	require.Equal(t, transport.RoleLight, identityOf(t, filepath.Join(dir, "member-7.pem")).Role)
	require.ErrorContains(t, run([]string{"reissue", "-dir", dir, "-cert", filepath.Join(dir, "member-7.pem")}, &out), "-role")
	require.NoError(t, run([]string{"reissue", "-dir", dir, "-cert", filepath.Join(dir, "member-7.pem"), "-role", "voter"}, &out))
	got := identityOf(t, filepath.Join(dir, "member-7.pem"))
	require.Equal(t, transport.Identity{Cluster: "orders-prod", ID: 7, Role: transport.RoleVoter}, got)
	cert, err := readCert(filepath.Join(dir, "member-7.pem"))
	require.NoError(t, err)
	require.Equal(t, []string{"n7.example"}, cert.DNSNames)
	require.Equal(t, "10.0.0.7", cert.IPAddresses[0].String())
	require.Error(t, run([]string{"reissue", "-dir", dir, "-cert", filepath.Join(dir, "operator-alice.pem"), "-role", "voter"}, &out))

	out.Reset()
	require.NoError(t, run([]string{"show", filepath.Join(dir, "member-7.pem")}, &out))
	require.Contains(t, out.String(), "member 7 of orders-prod, role voter")
	require.Contains(t, out.String(), "serial "+transport.SerialString(cert.SerialNumber))
	out.Reset()
	require.NoError(t, run([]string{"show", filepath.Join(dir, "operator-alice.pem")}, &out))
	require.True(t, strings.HasPrefix(out.String(), "operator alice of orders-prod, role operator"), out.String())
}
