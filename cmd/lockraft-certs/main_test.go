package main

import (
	"bytes"
	"fmt"
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

// Each role is issued on request and never by default, for an id given and
// written in hex; an operator gets a client certificate that is no member; a
// certificate issued before roles (read as light) is reissued with a role,
// keeping its id (in the form it has, unless -hex), cluster and host names;
// show prints what a certificate names and its serial.
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

	// -id is hex, as lockraftctl shows it; files and URIs name it in 16 hex digits.
	for i, c := range []struct {
		flag string
		id   uint64
		role transport.Role
	}{{"1", 1, transport.RoleVoter}, {"2", 2, transport.RoleLight}, {"1a", 0x1a, transport.RoleVoter | transport.RoleOperator},
		{"0xdeadbeef00c0ffee", 0xdeadbeef00c0ffee, transport.RoleLight}, {"000000000000002A", 0x2a, transport.RoleVoter}} {
		require.NoError(t, run([]string{"member", "-dir", dir, "-cluster", "orders-prod", "-id", c.flag, "-role", c.role.String(),
			"-host", fmt.Sprintf("10.0.0.%d", i+1)}, &out))
		got := identityOf(t, filepath.Join(dir, fmt.Sprintf("member-%016x.pem", c.id)))
		require.Equal(t, transport.Identity{Cluster: "orders-prod", ID: c.id, Role: c.role}, got, c.flag)
		require.Contains(t, out.String(), "names "+transport.MemberRoleURI("orders-prod", c.id, c.role))
	}
	require.Contains(t, out.String(), "names lockraft://orders-prod/000000000000001a?role=voter,operator")
	for _, bad := range []string{"0", "ffffffffffffffff", "x1", "-1", "10000000000000000"} {
		require.ErrorContains(t, run([]string{"member", "-dir", dir, "-cluster", "orders-prod", "-id", bad, "-role", "voter"}, &out),
			"bad -id", bad)
	}

	require.NoError(t, run([]string{"operator", "-dir", dir, "-cluster", "orders-prod", "-name", "alice"}, &out))
	require.Equal(t, transport.Identity{Cluster: "orders-prod", Operator: "alice", Role: transport.RoleOperator},
		identityOf(t, filepath.Join(dir, "operator-alice.pem")))
	require.Error(t, run([]string{"operator", "-dir", dir, "-cluster", "orders-prod", "-name", "a/b"}, &out))

	// A certificate from before roles (and before hex ids): light until
	// reissued, and reissued with its id in decimal still, which members of
	// those versions read.
	ca, err := loadCA(dir)
	require.NoError(t, err)
	u, _ := url.Parse("lockraft://orders-prod/7")
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
	require.Equal(t, "lockraft://orders-prod/7?role=voter", cert.URIs[0].String())
	require.Contains(t, out.String(), "names lockraft://orders-prod/7?role=voter")
	// -hex: the same member in the hex form.
	require.NoError(t, run([]string{"reissue", "-dir", dir, "-cert", filepath.Join(dir, "member-7.pem"), "-role", "voter",
		"-hex", "-name", "member-0000000000000007"}, &out))
	got = identityOf(t, filepath.Join(dir, "member-0000000000000007.pem"))
	require.Equal(t, transport.Identity{Cluster: "orders-prod", ID: 7, Role: transport.RoleVoter}, got)
	hexCert, err := readCert(filepath.Join(dir, "member-0000000000000007.pem"))
	require.NoError(t, err)
	require.Equal(t, transport.MemberRoleURI("orders-prod", 7, transport.RoleVoter), hexCert.URIs[0].String())
	require.Equal(t, "lockraft voter 0000000000000007", hexCert.Subject.CommonName)
	// A hex certificate is reissued in hex.
	require.NoError(t, run([]string{"reissue", "-dir", dir, "-cert", filepath.Join(dir, "member-000000000000001a.pem"),
		"-role", "light"}, &out))
	hexCert, err = readCert(filepath.Join(dir, "member-000000000000001a.pem"))
	require.NoError(t, err)
	require.Equal(t, transport.MemberRoleURI("orders-prod", 0x1a, transport.RoleLight), hexCert.URIs[0].String())
	require.Error(t, run([]string{"reissue", "-dir", dir, "-cert", filepath.Join(dir, "operator-alice.pem"), "-role", "voter"}, &out))

	out.Reset()
	require.NoError(t, run([]string{"show", filepath.Join(dir, "member-7.pem")}, &out))
	require.Contains(t, out.String(), "member 0000000000000007 of orders-prod, role voter")
	require.Contains(t, out.String(), "serial "+transport.SerialString(cert.SerialNumber))
	out.Reset()
	require.NoError(t, run([]string{"show", filepath.Join(dir, "operator-alice.pem")}, &out))
	require.True(t, strings.HasPrefix(out.String(), "operator alice of orders-prod, role operator"), out.String())
}
