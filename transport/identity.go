package transport

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"go.etcd.io/raft/v3"

	"github.com/lockraft/lockraft/internal/views"
)

// Identities in certificates
//
// A certificate names its holder with one URI SAN of scheme lockraft:
//
//	lockraft://<cluster-id>/<raft-id>?role=voter           a voter-capable member
//	lockraft://<cluster-id>/<raft-id>?role=light           a light member
//	lockraft://<cluster-id>/<raft-id>?role=voter,operator  either, with operator rights
//	lockraft://<cluster-id>/operator/<name>?role=operator  an operator that is no member
//	lockraft://<cluster-id>/<raft-id>                      an older certificate: light
//
// for example lockraft://orders-prod/0000000000000003?role=voter. Why this
// shape:
//   - URI SANs are X.509's field for identities that are not host names
//     (SPIFFE uses them the same way), so the same certificate can also
//     carry the DNS names and IPs an operator's PKI wants, and Common Name
//     (deprecated for identity) plays no part.
//   - The raft id is what every raft message, session and hold is keyed by,
//     so binding it in the certificate makes authorisation one comparison:
//     the connection's verified id is the sender, and no table that a peer
//     could influence (gossip metadata) sits in between.
//   - The cluster id in the host part lets one CA serve several clusters:
//     a member of orders-prod is refused by orders-staging even though both
//     trust the same CA. (It must therefore be a DNS-style name: letters,
//     digits, '-' and '.'; Go's certificate parser rejects other hosts.)
//   - The id is written as 16 hex digits, as lockraftctl, the admin handler,
//     metrics and logs show it, so a certificate's subject can be matched
//     to a member by eye; gossip members use random 64-bit ids, which the
//     certificate tool generates. Certificates issued before this form
//     carry the id in decimal (lockraft://orders-prod/3), and are still
//     read: exactly 16 hex digits is the hex form, any other string of
//     decimal digits (no leading zero) the older decimal one. A decimal id
//     of exactly 16 digits is therefore read as hex, another id: such a
//     certificate then names no member it is used for, and is refused
//     (it fails closed); reissue it. Versions before the hex form refuse a
//     hex id (or read another one), so new certificates are issued once
//     every member runs a version that reads them.
//   - The role is chosen when the certificate is issued and travels in the
//     query, beside the id it qualifies: the path says who, the query what
//     it may do. A query is what versions that predate roles ignore (they
//     read the path only), so certificates with roles can be rolled out to
//     a running cluster before its binaries are upgraded; a role in the
//     path would have made them refuse the new certificates. An operator
//     without a member id has a path no such version accepts as a member.
//   - Unambiguous: exactly one lockraft URI, a query of exactly one role
//     parameter (comma-separated, each role once, no other parameter), no
//     user, port or fragment; anything else is refused, so a role this
//     version does not know never grants what it might mean elsewhere.
//   - Least privilege: a member URI without a role (every certificate issued
//     before roles) is a light member. Such a cluster migrates by reissuing
//     its voters' certificates with role=voter (lockraft-certs reissue,
//     which keeps their decimal id, what such versions read) and rotating
//     them in place before upgrading; see docs/security.md.

// MemberScheme is the URI scheme of member identities.
const MemberScheme = "lockraft"

// errIdentity is the cause of a rejected certificate: it names no member,
// more than one, another cluster, a reserved id, or a role it may not have.
var errIdentity = errors.New("transport: certificate does not name a member of this cluster")

// Role is what a certificate lets its holder do, chosen when it is issued. A
// member is either voter-capable or light; either may also be an operator,
// and an operator identity may be no member at all.
type Role uint8

const (
	// RoleLight: a member that opens its own sessions and locks through
	// forwarding (the typed calls); never a raft participant.
	RoleLight Role = 1 << iota
	// RoleVoter: a member that may be a raft participant (learner, voter,
	// standby) and send raft traffic; it may do what a light member does.
	RoleVoter
	// RoleOperator: may ask for operator actions (leadership transfer,
	// member removal, inspection on behalf of an operator).
	RoleOperator
)

// PlaintextRole is the role of every peer of a transport without TLS:
// nothing backs a sender's claim there (a loopback quick start, or an
// explicitly insecure setup), so every peer is treated as a voter and an
// operator.
const PlaintextRole = RoleVoter | RoleOperator

// Voter reports whether r may be a raft participant and send raft traffic.
func (r Role) Voter() bool { return r&RoleVoter != 0 }

// Member reports whether r is a member's role (voter-capable or light).
func (r Role) Member() bool { return r&(RoleVoter|RoleLight) != 0 }

// Operator reports whether r may ask for operator actions.
func (r Role) Operator() bool { return r&RoleOperator != 0 }

// roleNames in the order String writes them.
var roleNames = []struct {
	r    Role
	name string
}{{RoleVoter, "voter"}, {RoleLight, "light"}, {RoleOperator, "operator"}}

// String is the role as a certificate's URI carries it ("voter",
// "light,operator"); "none" for no role.
func (r Role) String() string {
	var parts []string
	for _, n := range roleNames {
		if r&n.r != 0 {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// ParseRole reads a role as String writes it: comma-separated names among
// voter, light and operator, each at most once; not voter and light both.
func ParseRole(s string) (Role, error) {
	var r Role
	for _, part := range strings.Split(s, ",") {
		var got Role
		for _, n := range roleNames {
			if part == n.name {
				got = n.r
			}
		}
		if got == 0 {
			return 0, fmt.Errorf("%w: unknown role %q", errIdentity, part)
		}
		if r&got != 0 {
			return 0, fmt.Errorf("%w: role %q twice", errIdentity, part)
		}
		r |= got
	}
	if r.Voter() && r&RoleLight != 0 {
		return 0, fmt.Errorf("%w: a member is voter or light, not both", errIdentity)
	}
	return r, nil
}

// Identity is what a certificate says about its holder.
type Identity struct {
	// Cluster is the cluster id the certificate is for.
	Cluster string
	// ID is the member's raft id; 0 for an operator that is no member.
	ID uint64
	// Operator names an operator that is no member ("" for a member).
	Operator string
	// Role is what the holder may do. A member URI without a role is
	// RoleLight.
	Role Role
}

// MemberURI returns the URI SAN that names member id of cluster without a
// role: what certificates issued before roles carry. It is read as a light
// member; MemberRoleURI names a member with its role.
func MemberURI(cluster string, id uint64) string {
	return (&url.URL{Scheme: MemberScheme, Host: cluster, Path: "/" + views.MemberID(id).String()}).String()
}

// MemberRoleURI returns the URI SAN that names member id of cluster with
// role (voter or light, optionally with operator).
func MemberRoleURI(cluster string, id uint64, role Role) string {
	return (&url.URL{Scheme: MemberScheme, Host: cluster, Path: "/" + views.MemberID(id).String(),
		RawQuery: "role=" + role.String()}).String()
}

// parseMemberIDText reads a member id as a certificate URI or a deny-list
// writes it: exactly 16 lower-case hex digits (views.MemberID), or, as
// certificates issued before the hex form have it, decimal without
// leading zeros and of any other length. A decimal id of exactly 16 digits
// is read as hex (see the comment at the top of this file). Anything else
// is errIdentity.
func parseMemberIDText(s string) (uint64, error) {
	if len(s) == 16 {
		if strings.Trim(s, "0123456789abcdef") == "" {
			if n, err := strconv.ParseUint(s, 16, 64); err == nil {
				return n, nil
			}
		}
		return 0, fmt.Errorf("%w: member id %q: want 16 hex digits", errIdentity, s)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || strconv.FormatUint(n, 10) != s {
		return 0, fmt.Errorf("%w: member id %q: want 16 hex digits (or, from an earlier certificate, decimal)", errIdentity, s)
	}
	return n, nil
}

// OperatorURI returns the URI SAN of an operator named name that is no
// member of cluster (an operator's client certificate, e.g. lockraftctl's).
func OperatorURI(cluster, name string) string {
	return (&url.URL{Scheme: MemberScheme, Host: cluster, Path: operatorPath + name,
		RawQuery: "role=" + RoleOperator.String()}).String()
}

// operatorPath prefixes the path of an operator identity that is no member.
const operatorPath = "/operator/"

// ValidOperatorName reports whether name can name an operator identity: 1
// to 64 letters, digits, '.', '_' or '-'.
func ValidOperatorName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidateClusterID reports whether cluster can be the host part of a member
// URI: a DNS-style name of at most 63-byte labels of letters, digits and
// '-', separated by dots.
func ValidateClusterID(cluster string) error {
	if cluster == "" || len(cluster) > 253 {
		return fmt.Errorf("cluster id %q: want 1 to 253 bytes", cluster)
	}
	for _, label := range strings.Split(cluster, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("cluster id %q: want a DNS-style name (letters, digits, '-', '.')", cluster)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("cluster id %q: want a DNS-style name (letters, digits, '-', '.')", cluster)
			}
		}
	}
	return nil
}

// ParseIdentity returns the identity a certificate names: the one place
// where a certificate's URI SAN is read (see the comment at the top of this
// file). It must carry exactly one lockraft URI, naming either a member
// (a usable id: not 0, not one of raft's local-thread ids; role voter or
// light, optionally with operator; no role: light) or an operator that is
// no member (role exactly operator).
func ParseIdentity(cert *x509.Certificate) (Identity, error) {
	var u *url.URL
	for _, c := range cert.URIs {
		if c.Scheme != MemberScheme {
			continue
		}
		if u != nil {
			return Identity{}, fmt.Errorf("%w: more than one %s URI (subject %q)", errIdentity, MemberScheme, cert.Subject)
		}
		u = c
	}
	if u == nil {
		return Identity{}, fmt.Errorf("%w: no %s:// URI SAN (subject %q)", errIdentity, MemberScheme, cert.Subject)
	}
	bad := func(why string) (Identity, error) {
		return Identity{}, fmt.Errorf("%w: bad identity URI %q: %s", errIdentity, u, why)
	}
	if u.Opaque != "" || u.User != nil || u.Port() != "" || u.Fragment != "" || u.RawFragment != "" ||
		u.Host == "" || u.ForceQuery {
		return bad("want lockraft://<cluster>/<id>?role=<role>")
	}
	id := Identity{Cluster: u.Host}
	var role Role
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil || len(q) != 1 || len(q["role"]) != 1 {
			return bad("the query must be one role parameter")
		}
		if role, err = ParseRole(q["role"][0]); err != nil {
			return bad(err.Error())
		}
	}
	if name, ok := strings.CutPrefix(u.Path, operatorPath); ok {
		if !ValidOperatorName(name) {
			return bad("operator name: want 1 to 64 letters, digits, '.', '_', '-'")
		}
		if role != RoleOperator {
			return bad("an operator identity has role=operator and no other")
		}
		id.Operator, id.Role = name, role
		return id, nil
	}
	rest, ok := strings.CutPrefix(u.Path, "/")
	n, err := parseMemberIDText(rest)
	if !ok || err != nil {
		return bad("the member id must be 16 hex digits (or decimal, as earlier certificates have it)")
	}
	if ReservedID(n) {
		return Identity{}, fmt.Errorf("%w: reserved member id %016x", errIdentity, n)
	}
	switch {
	case u.RawQuery == "":
		role = RoleLight // issued before roles: the least a member may do
	case !role.Member():
		return bad("a member's role includes voter or light")
	}
	id.ID, id.Role = n, role
	return id, nil
}

// MemberIdentity returns the cluster and member id a certificate names; an
// operator identity that is no member is refused. See ParseIdentity.
func MemberIdentity(cert *x509.Certificate) (cluster string, id uint64, err error) {
	ident, err := ParseIdentity(cert)
	if err != nil {
		return "", 0, err
	}
	if ident.ID == 0 {
		return "", 0, fmt.Errorf("%w: operator %q is no member", errIdentity, ident.Operator)
	}
	return ident.Cluster, ident.ID, nil
}

// ReservedID reports whether id can never be a member: 0, and the ids raft
// uses for its local storage threads (a message "from" them would bypass
// raft's guard against local messages arriving from the network).
func ReservedID(id uint64) bool {
	return id == 0 || raft.IsLocalMsgTarget(id)
}
