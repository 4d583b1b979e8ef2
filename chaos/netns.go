package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// netnsLab puts each node process in its own network namespace, linked by
// a veth pair to a bridge in a hub namespace; a partition takes a node's
// hub-side link down (its packets vanish: no resets, as in a real
// partition). Everything lives in namespaces created here.
type netnsLab struct {
	tag  string
	size int
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetnsLab creates the namespaces; its first step is the probe: where
// ip netns is missing or not allowed it returns the reason.
func newNetnsLab(seed uint64, size int) (*netnsLab, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("iproute2 not installed (apt-get install -y iproute2)")
	}
	l := &netnsLab{tag: fmt.Sprintf("lrc%d", os.Getpid()%100000), size: size}
	if err := ipCmd("netns", "add", l.hub()); err != nil {
		return nil, err
	}
	steps := [][]string{
		{"-n", l.hub(), "link", "set", "lo", "up"},
		{"-n", l.hub(), "link", "add", "br0", "type", "bridge"},
		{"-n", l.hub(), "link", "set", "br0", "up"},
	}
	for i := 1; i <= size; i++ {
		id := uint64(i)
		steps = append(steps,
			[]string{"netns", "add", l.NS(id)},
			[]string{"link", "add", "name", l.veth(id), "netns", l.NS(id), "type", "veth", "peer", "name", l.hubVeth(id), "netns", l.hub()},
			[]string{"-n", l.NS(id), "link", "set", "lo", "up"},
			[]string{"-n", l.NS(id), "addr", "add", fmt.Sprintf("10.77.0.%d/24", i), "dev", l.veth(id)},
			[]string{"-n", l.NS(id), "link", "set", l.veth(id), "up"},
			[]string{"-n", l.hub(), "link", "set", l.hubVeth(id), "master", "br0"},
			[]string{"-n", l.hub(), "link", "set", l.hubVeth(id), "up"},
		)
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

func (l *netnsLab) hub() string              { return l.tag + "h" }
func (l *netnsLab) NS(id uint64) string      { return fmt.Sprintf("%sn%d", l.tag, id) }
func (l *netnsLab) veth(id uint64) string    { return fmt.Sprintf("v%d", id) }
func (l *netnsLab) hubVeth(id uint64) string { return fmt.Sprintf("h%d", id) }

// Addr is node id's raft address inside its namespace.
func (l *netnsLab) Addr(id uint64) string { return fmt.Sprintf("10.77.0.%d:7000", id) }

// Isolate cuts node id off from every other node.
func (l *netnsLab) Isolate(id uint64) { ipCmd("-n", l.hub(), "link", "set", l.hubVeth(id), "down") }

// HealAll brings every link up.
func (l *netnsLab) HealAll() {
	for i := 1; i <= l.size; i++ {
		ipCmd("-n", l.hub(), "link", "set", l.hubVeth(uint64(i)), "up")
	}
}

// Close deletes the namespaces (and with them the links).
func (l *netnsLab) Close() {
	for i := 1; i <= l.size; i++ {
		ipCmd("netns", "del", l.NS(uint64(i)))
	}
	ipCmd("netns", "del", l.hub())
}
