package transport

// mdVersion carries the sender's Config.Version with every RPC. A node of a
// version that predates it sends none: its version reads as "".
const mdVersion = "lockraft-version"

// noteVersion records the version an authenticated RPC from peer carried.
func (t *Transport) noteVersion(peer uint64, version string) {
	if v, ok := t.versions.Load(peer); !ok || v.(string) != version {
		t.versions.Store(peer, version)
	}
}

// PeerVersion returns the version the last RPC from peer carried (its
// Config.Version; "" from a node that sends none) and whether any RPC from
// peer has been received since this Transport started. Safe for concurrent
// use.
func (t *Transport) PeerVersion(peer uint64) (version string, seen bool) {
	v, ok := t.versions.Load(peer)
	if !ok {
		return "", false
	}
	return v.(string), true
}
