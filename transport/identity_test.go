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
		MemberURI("orders-prod", 3):                         {Cluster: "orders-prod", ID: 3, Role: RoleLight},
		MemberRoleURI("orders-prod", 3, RoleVoter):          {Cluster: "orders-prod", ID: 3, Role: RoleVoter},
		MemberRoleURI("orders-prod", 3, RoleLight):          {Cluster: "orders-prod", ID: 3, Role: RoleLight},
		MemberRoleURI("c", 1<<62, RoleVoter|RoleOperator):   {Cluster: "c", ID: 1 << 62, Role: RoleVoter | RoleOperator},
		"lockraft://c/0000000000000009?role=light,operator": {Cluster: "c", ID: 9, Role: RoleLight | RoleOperator},
		OperatorURI("orders-prod", "alice.b_c-1"):           {Cluster: "orders-prod", Operator: "alice.b_c-1", Role: RoleOperator},
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
		{"lockraft://c/0000000000000000?role=voter"},
		{"lockraft://c/ffffffffffffffff?role=voter"},
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

// A member id in a URI is 16 hex digits, as lockraftctl and the logs show
// it. Certificates issued before that carry it in decimal, and are read as
// they always were; exactly 16 digits is the hex form, so a decimal id of
// that length names another member (and is refused where it is used).
// Anything else is refused.
func TestMemberURIIDForms(t *testing.T) {
	p := newPKI(t)
	require.Equal(t, "lockraft://orders-prod/000000000000002a?role=voter", MemberRoleURI("orders-prod", 42, RoleVoter))
	require.Equal(t, "lockraft://orders-prod/8000000000000001", MemberURI("orders-prod", 1<<63|1))
	for uri, id := range map[string]uint64{
		MemberRoleURI("c", 42, RoleVoter):                 42,
		MemberRoleURI("c", 0x1234567890123456, RoleVoter): 0x1234567890123456,
		// Decimal, as certificates of earlier versions have it.
		"lockraft://c/42?role=voter":                   42,
		"lockraft://c/3":                               3,
		"lockraft://c/123456789012345?role=voter":      123456789012345,
		"lockraft://c/12345678901234567?role=voter":    12345678901234567,
		"lockraft://c/18446744073709551613?role=voter": 18446744073709551613,
		// 16 digits: hex, whatever an earlier certificate meant.
		"lockraft://c/1234567890123456?role=voter": 0x1234567890123456,
	} {
		got, err := p.identityOf(uri)
		require.NoError(t, err, uri)
		require.Equal(t, id, got.ID, uri)
	}
	for _, bad := range []string{
		"lockraft://c/000000000000002A?role=voter",  // upper case: not as written
		"lockraft://c/00000000000002a?role=voter",   // 15 hex digits
		"lockraft://c/0000000000000002a?role=voter", // 17
		"lockraft://c/0x000000000000002a?role=voter",
		"lockraft://c/2a?role=voter",
		"lockraft://c/042?role=voter", // decimal with a leading zero
		"lockraft://c/-42?role=voter",
		"lockraft://c/+42?role=voter",
		"lockraft://c/18446744073709551616?role=voter", // 2^64
		"lockraft://c/000000000000000g?role=voter",
		"lockraft://c/%20000000000000002a?role=voter",
	} {
		_, err := p.identityOf(bad)
		require.ErrorIs(t, err, errIdentity, bad)
	}
}

// Versions before the hex form read the path as decimal without leading
// zeros: a hex URI is refused by them or names another id, never the
// member it is for, which is why new certificates are issued once every
// member reads them. The decimal certificates they issued, with roles,
// are read here as the same member (TestMemberURIIDForms); an operator
// identity is no member to them.
func TestHexURIReadByOlderVersions(t *testing.T) {
	older := func(s string) (uint64, error) {
		u, err := url.Parse(s)
		require.NoError(t, err)
		rest := strings.TrimPrefix(u.Path, "/")
		id, err := strconv.ParseUint(rest, 10, 64)
		if err == nil && strconv.FormatUint(id, 10) != rest {
			err = strconv.ErrSyntax
		}
		return id, err
	}
	for _, id := range []uint64{3, 42, 0xdeadbeef, 1 << 63, 0x1234567890123456} {
		got, err := older(MemberRoleURI("orders-prod", id, RoleVoter))
		require.True(t, err != nil || got != id, "%016x read as %d", id, got)
	}
	_, err := older(OperatorURI("orders-prod", "alice"))
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
