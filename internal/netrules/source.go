package netrules

import (
	"net"
	"net/netip"
)

// SourceOf is the source address a connection counts against when a node
// bounds connections per source: its IPv4 address, or its IPv6 address's
// /64 (one host or site has a whole /64 to connect from).
func SourceOf(addr net.Addr) string {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return addr.String()
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.String()
		}
	}
	return ip.String()
}

// Busiest returns the source with the largest count (the first in sorted
// order among equals, so that the choice does not depend on map order) and
// that count; "", 0 for none. A node whose connection table is full takes
// a place from the busiest source for a newcomer from a source of at least
// two fewer, so a member from an address of its own always gets in.
func Busiest(counts map[string]int) (source string, n int) {
	for src, c := range counts {
		if c > n || (c == n && src < source) {
			source, n = src, c
		}
	}
	return source, n
}
