package lockraft

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/node"
	"github.com/lockraft/lockraft/transport"
)

// Security options (README "Security").
//
// Members authenticate each other with mutual TLS: every member has a
// certificate of the cluster's CA that names it with a URI SAN,
// MemberURI(clusterID, raftID). On loopback addresses a node may run without
// TLS (the quick start); anywhere else Join refuses to start without it
// unless WithInsecure is given. Gossip (WithGossip) is encrypted with
// WithGossipKeys, required off loopback on the same terms.

type securityOptions struct {
	files      *[3]string
	roots      func() (*x509.CertPool, error)
	cert       func() (*tls.Certificate, error)
	gossipKeys [][]byte
}

// MemberURI is the URI SAN a member's certificate must carry:
// lockraft://<clusterID>/<raftID>, raftID in 16 hex digits as MemberID
// prints it (lockraft://orders-prod/0000000000000003). With static peers
// the raft id is the member's 1-based position in the peer list; with
// gossip it is any random non-zero 64-bit number, taken from the
// certificate. Certificates of earlier versions, with the id in decimal
// (lockraft://orders-prod/3), are still read; a decimal id of exactly 16
// digits would be read as hex, another member, and is refused.
func MemberURI(clusterID string, raftID MemberID) string {
	return transport.MemberURI(clusterID, uint64(raftID))
}

// WithTLSFiles turns on mutual TLS from PEM files: caFile holds the
// cluster's CA certificate(s), certFile this member's certificate (naming
// it, see MemberURI) followed by any intermediates, keyFile its private key.
// The files are read again when they change (checked at most once a second),
// so replacing them rotates the certificate or the CA without a restart;
// during a CA rotation put both CAs in caFile. Join fails if they cannot be
// read or the certificate does not name this member.
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(o *options) { o.sec.files = &[3]string{caFile, certFile, keyFile} }
}

// WithTLSCertificates turns on mutual TLS with material the caller manages:
// roots returns the CAs a peer must chain to, cert this member's
// certificate. Both are called on every new connection (they must be safe
// for concurrent use and fast), so returning new values rotates them without
// a restart.
func WithTLSCertificates(roots func() (*x509.CertPool, error), cert func() (*tls.Certificate, error)) Option {
	return func(o *options) { o.sec.roots, o.sec.cert = roots, cert }
}

// WithInsecure allows serving without TLS (and gossiping without keys) on
// addresses other hosts can reach. Anyone who can connect can then
// impersonate any member: crash nodes, take or release locks, remove
// members. Meant for isolated networks and experiments; the node logs a loud
// warning when it starts this way.
func WithInsecure() Option { return func(o *options) { o.cfg.Insecure = true } }

// WithDenyList names a deny-list file: certificate serials and member ids
// this member refuses on every handshake, both ways, one entry a line
// ("serial 5f3a9c...", "member ..."; docs/security.md gives the format).
// The file is read at Join (an unreadable or malformed file is
// ErrInvalidConfig) and again when it changes, checked about once a second;
// a change closes the connections it now denies, and a replacement that
// cannot be parsed is logged and ignored until it can. Meant for TLS
// clusters: without TLS no certificate is presented to check.
func WithDenyList(file string) Option { return func(o *options) { o.cfg.DenyListFile = file } }

// WithGossipKeys sets the gossip keyring (each key 16, 24 or 32 bytes, for
// AES-128/192/256-GCM): the first encrypts, all decrypt. Rotation without a
// restart: AddGossipKey(new) on every member, then UseGossipKey(new) on
// every member, then RemoveGossipKey(old) on every member. (With a restart:
// keys [old, new] everywhere, then [new, old], then [new].)
func WithGossipKeys(keys ...[]byte) Option {
	return func(o *options) { o.sec.gossipKeys = slices.Clone(keys) }
}

// security applies the security options to cfg.
func (o *options) security(cfg *node.Config) error {
	switch {
	case o.sec.files != nil && o.sec.roots != nil:
		return fmt.Errorf("%w: WithTLSFiles and WithTLSCertificates are mutually exclusive", ErrInvalidConfig)
	case o.sec.files != nil:
		t, err := transport.TLSFiles(o.sec.files[0], o.sec.files[1], o.sec.files[2])
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
		cfg.TLS = t
	case o.sec.roots != nil || o.sec.cert != nil:
		if o.sec.roots == nil || o.sec.cert == nil {
			return fmt.Errorf("%w: WithTLSCertificates needs both roots and cert", ErrInvalidConfig)
		}
		cfg.TLS = &transport.TLS{Roots: o.sec.roots, Certificate: o.sec.cert}
	}
	if len(o.sec.gossipKeys) > 0 {
		if o.gossip == nil {
			return fmt.Errorf("%w: WithGossipKeys without WithGossip", ErrInvalidConfig)
		}
		o.gossip.Keys = o.sec.gossipKeys
	}
	return nil
}

// AddGossipKey adds a gossip key to this member's keyring (step 1 of a
// rotation, on every member). ErrInvalidConfig for a bad key or a member
// started without keys.
func (n *Node) AddGossipKey(key []byte) error { return n.n.AddGossipKey(key) }

// UseGossipKey makes an added key the one this member encrypts with (step 2,
// on every member once all have it).
func (n *Node) UseGossipKey(key []byte) error { return n.n.UseGossipKey(key) }

// RemoveGossipKey drops an old key (step 3, on every member once all use the
// new one).
func (n *Node) RemoveGossipKey(key []byte) error { return n.n.RemoveGossipKey(key) }

// ErrQuotaExceeded: a request beyond a quota (WithQuotas) was refused:
// another session beyond the member's sessions, another name beyond a
// session's locks. A voter or learner refuses its own Lock at once; the
// leader refuses what other members ask of it. Outcome: known, nothing was
// done. Retryable: no, not as is: the request may succeed once the member
// holds less.
var ErrQuotaExceeded = lockerr.ErrQuotaExceeded

// The quotas' defaults (WithQuotas).
const (
	DefaultMaxSessionsPerMember = node.DefaultMaxSessionsPerMember // 16
	DefaultMaxLocksPerSession   = node.DefaultMaxLocksPerSession   // 1 << 20
)

// WithQuotas sets the quotas the leader enforces on what each member asks of
// it: sessionsPerMember sessions open at once for one member (default
// DefaultMaxSessionsPerMember, 16: one per incarnation, with room for
// restarts), and locksPerSession names one session holds or waits for at once
// (default DefaultMaxLocksPerSession, 2^20). 0 keeps a default; a
// negative value, or one above 2^16 sessions or 2^24 locks, makes Join fail
// with ErrInvalidConfig. In a static cluster only the listed members open
// sessions at all.
func WithQuotas(sessionsPerMember, locksPerSession int) Option {
	return func(o *options) {
		o.cfg.MaxSessionsPerMember, o.cfg.MaxLocksPerSession = sessionsPerMember, locksPerSession
	}
}
