package transport

import (
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// identityOf issues a certificate carrying uris as SANs and parses it.
func (p *pki) identityOf(uris ...string) (Identity, error) {
	var us []*url.URL
	for _, u := range uris {
		pu, err := url.Parse(u)
		require.NoError(p.t, err)
		us = append(us, pu)
	}
	certPEM, keyPEM, err := p.ca.Issue("x", us, nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(p.t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(p.t, err)
	return ParseIdentity(pair.Leaf)
}

// What a certificate's URI SAN says, read in one place: a member with its
// role (none: light, the least a member may do), an operator that is no
// member; everything ambiguous or unknown is refused.
func TestParseIdentity(t *testing.T) {
	p := newPKI(t)
	for uri, want := range map[string]Identity{
		MemberURI("orders-prod", 3):                       {Cluster: "orders-prod", ID: 3, Role: RoleLight},
		MemberRoleURI("orders-prod", 3, RoleVoter):        {Cluster: "orders-prod", ID: 3, Role: RoleVoter},
		MemberRoleURI("orders-prod", 3, RoleLight):        {Cluster: "orders-prod", ID: 3, Role: RoleLight},
		MemberRoleURI("c", 1<<62, RoleVoter|RoleOperator): {Cluster: "c", ID: 1 << 62, Role: RoleVoter | RoleOperator},
		"lockraft://c/9?role=light,operator":              {Cluster: "c", ID: 9, Role: RoleLight | RoleOperator},
		OperatorURI("orders-prod", "alice.b_c-1"):         {Cluster: "orders-prod", Operator: "alice.b_c-1", Role: RoleOperator},
	} {
		got, err := p.identityOf(uri, "spiffe://example.org/x")
		require.NoError(t, err, uri)
		require.Equal(t, want, got, uri)
	}
	for _, bad := range [][]string{
		nil,
		{"spiffe://example.org/x"},
		{MemberURI("c", 0)},
		{MemberURI("c", ^uint64(0))},
		{MemberURI("c", ^uint64(0)-1)},
		{MemberURI("c", 1), MemberURI("c", 2)},
		{MemberURI("c", 1), MemberRoleURI("c", 1, RoleVoter)},
		{"lockraft://c/x"},
		{"lockraft://c/03?role=voter"},
		{"lockraft://c/3/4?role=voter"},
		{"lockraft://c/?role=voter"},
		{"lockraft://c/3?role=admin"},
		{"lockraft://c/3?role=voter,light"},
		{"lockraft://c/3?role=voter,voter"},
		{"lockraft://c/3?role=operator"},
		{"lockraft://c/3?role="},
		{"lockraft://c/3?role=voter&role=light"},
		{"lockraft://c/3?role=voter&x=1"},
		{"lockraft://c/3?role=voter;x=1"},
		{"lockraft://c/3?"},
		{"lockraft://c/3?role=voter#frag"},
		{"lockraft://u@c/3?role=voter"},
		{"lockraft://c:7/3?role=voter"},
		{"lockraft:///3?role=voter"},
		{"lockraft://c/operator/alice"},
		{"lockraft://c/operator/alice?role=voter"},
		{"lockraft://c/operator/alice?role=operator,voter"},
		{"lockraft://c/operator/?role=operator"},
		{"lockraft://c/operator/" + strings.Repeat("a", 65) + "?role=operator"},
		{"lockraft://c/operator/a%2Fb?role=operator"},
	} {
		_, err := p.identityOf(bad...)
		require.ErrorIs(t, err, errIdentity, "%v", bad)
	}
	// MemberIdentity is the member part: an operator is no member.
	_, _, err := MemberIdentity(mustLeaf(t, p, OperatorURI("c", "alice")))
	require.ErrorIs(t, err, errIdentity)
	require.NoError(t, ValidateClusterID("orders-prod.eu"))
	require.Error(t, ValidateClusterID("my cluster"))
}

func mustLeaf(t *testing.T, p *pki, uri string) *x509.Certificate {
	t.Helper()
	u, err := url.Parse(uri)
	require.NoError(t, err)
	certPEM, keyPEM, err := p.ca.Issue("x", []*url.URL{u}, nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	return pair.Leaf
}

// A member URI with a role reads, to a version that predates roles, as the
// member it names: such versions took the id from the path alone
// (strconv.ParseUint of the path without its "/"), and the role is in the
// query. So certificates with roles can be rolled out before the upgrade.
// An operator identity is no member to them.
func TestRoleURIReadByOlderVersions(t *testing.T) {
	older := func(s string) (string, uint64, error) {
		u, err := url.Parse(s)
		require.NoError(t, err)
		id, err := strconv.ParseUint(strings.TrimPrefix(u.Path, "/"), 10, 64)
		return u.Host, id, err
	}
	for _, r := range []Role{RoleVoter, RoleLight, RoleVoter | RoleOperator} {
		cluster, id, err := older(MemberRoleURI("orders-prod", 42, r))
		require.NoError(t, err)
		require.Equal(t, "orders-prod", cluster)
		require.Equal(t, uint64(42), id)
	}
	_, _, err := older(OperatorURI("orders-prod", "alice"))
	require.Error(t, err)
}

func TestRoleStrings(t *testing.T) {
	for _, r := range []Role{RoleVoter, RoleLight, RoleOperator, RoleVoter | RoleOperator, RoleLight | RoleOperator} {
		got, err := ParseRole(r.String())
		require.NoError(t, err)
		require.Equal(t, r, got)
	}
	require.Equal(t, "none", Role(0).String())
	require.True(t, PlaintextRole.Voter() && PlaintextRole.Operator() && PlaintextRole.Member())
	require.False(t, RoleLight.Voter())
	require.False(t, RoleOperator.Member())
}
