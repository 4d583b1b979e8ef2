package membership

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"
)

// Seeds may be DNS names: "lockraft-headless.orders.svc.cluster.local:7946"
// (a Kubernetes headless Service answers with one address per pod) as well
// as "10.0.0.7:7946". They are resolved here, not by memberlist, so that a
// member can tell which answers are itself and which it already knows, and
// resolved again while the cluster forms: pods come up one by one, and the
// first answers name only some of them (often only the asking pod itself).
//
// The seed loop (Membership.seedLoop) resolves the seeds every
// RetryJoinInterval, doubling up to 8× while nothing new turns up, and joins
// every resolved address that is neither this member nor an alive member it
// already knows. It runs from Start until StopSeeding (the node calls it once
// the cluster has formed and this member is part of it) or Shutdown.

// seedResolver expands seeds into gossip addresses.
type seedResolver struct {
	lookup func(ctx context.Context, host string) ([]string, error)
}

// resolve returns the addresses ("ip:port", sorted, without duplicates) the
// seeds stand for, and one error per seed that could not be resolved (a
// name without records yet is normal while pods start). Literal IPs pass
// through without a lookup.
func (r seedResolver) resolve(ctx context.Context, seeds []string) ([]string, []error) {
	var out []string
	var errs []error
	for _, s := range seeds {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("seed %q: %v", s, err))
			continue
		}
		if net.ParseIP(host) != nil {
			out = append(out, net.JoinHostPort(host, port))
			continue
		}
		ips, err := r.lookup(ctx, host)
		if err != nil {
			errs = append(errs, fmt.Errorf("seed %q: %v", s, err))
			continue
		}
		for _, ip := range ips {
			out = append(out, net.JoinHostPort(ip, port))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), errs
}

// candidates are the resolved addresses worth joining: not this member,
// not an alive member already known.
func candidates(resolved []string, self string, known []Member) []string {
	var out []string
	for _, a := range resolved {
		if a == self || slices.ContainsFunc(known, func(m Member) bool { return m.State == StateAlive && m.Addr == a }) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// StopSeeding ends the seed loop: call it once this member is part of the
// formed cluster (gossip then keeps the view). Idempotent.
func (m *Membership) StopSeeding() {
	m.seedOnce.Do(func() { close(m.seedStop) })
}

// joinSeeds resolves the seeds and joins the new addresses among them; it
// reports how many answered and whether there was anything to try.
func (m *Membership) joinSeeds() (joined int, tried bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timing.TCPTimeout)
	resolved, errs := m.resolver.resolve(ctx, m.cfg.Seeds)
	cancel()
	cands := candidates(resolved, m.Local().Addr, m.Members())
	if len(cands) == 0 {
		if len(errs) > 0 {
			return 0, false, fmt.Errorf("%v", errs)
		}
		return 0, false, nil
	}
	n, err := m.ml.Join(cands)
	return n, true, err
}

// seedLoop re-resolves and joins the seeds until StopSeeding or Shutdown.
func (m *Membership) seedLoop() {
	defer m.wg.Done()
	delay := m.timing.RetryJoinInterval
	for {
		select {
		case <-m.stop:
			return
		case <-m.seedStop:
			return
		case <-time.After(delay):
		}
		n, tried, err := m.joinSeeds()
		switch {
		case n > 0:
			m.log.Info("joined seeds", "contacted", n)
			delay = m.timing.RetryJoinInterval
			continue
		case tried:
			m.log.Debug("seeds did not answer; retrying", "seeds", m.cfg.Seeds, "err", err, "next_in", delay)
		case err != nil:
			m.log.Debug("seeds not resolvable yet; retrying", "err", err, "next_in", delay)
		}
		delay = min(delay*2, 8*m.timing.RetryJoinInterval)
	}
}
