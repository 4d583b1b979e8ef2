package transport

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"go.etcd.io/raft/v3"
)

// Member identity in certificates
//
// A member's certificate names it with one URI SAN:
//
//	lockraft://<cluster-id>/<raft-id>
//
// for example lockraft://orders-prod/3. Why this shape:
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
//   - The id is decimal, as in the static configuration (1, 2, 3); gossip
//     members use random 64-bit ids, which the certificate tool generates.

// MemberScheme is the URI scheme of member identities.
const MemberScheme = "lockraft"

// ErrIdentity is the cause of a rejected certificate: it names no member,
// more than one, another cluster, or a reserved id.
var ErrIdentity = errors.New("transport: certificate does not name a member of this cluster")

// MemberURI returns the URI SAN that names member id of cluster.
func MemberURI(cluster string, id uint64) string {
	return (&url.URL{Scheme: MemberScheme, Host: cluster, Path: "/" + strconv.FormatUint(id, 10)}).String()
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

// MemberIdentity returns the cluster and member id a certificate names. The
// certificate must carry exactly one lockraft URI SAN with a usable id (not
// 0 and not one of raft's local-thread ids).
func MemberIdentity(cert *x509.Certificate) (cluster string, id uint64, err error) {
	found := 0
	for _, u := range cert.URIs {
		if u.Scheme != MemberScheme {
			continue
		}
		found++
		cluster = u.Host
		id, err = strconv.ParseUint(strings.TrimPrefix(u.Path, "/"), 10, 64)
		if err != nil || !strings.HasPrefix(u.Path, "/") {
			return "", 0, fmt.Errorf("%w: bad member URI %q", ErrIdentity, u)
		}
	}
	switch {
	case found == 0:
		return "", 0, fmt.Errorf("%w: no %s:// URI SAN (subject %q)", ErrIdentity, MemberScheme, cert.Subject)
	case found > 1:
		return "", 0, fmt.Errorf("%w: %d member URIs (subject %q)", ErrIdentity, found, cert.Subject)
	case ReservedID(id):
		return "", 0, fmt.Errorf("%w: reserved member id %d", ErrIdentity, id)
	}
	return cluster, id, nil
}

// ReservedID reports whether id can never be a member: 0, and the ids raft
// uses for its local storage threads (a message "from" them would bypass
// raft's guard against local messages arriving from the network).
func ReservedID(id uint64) bool {
	return id == 0 || raft.IsLocalMsgTarget(id)
}
