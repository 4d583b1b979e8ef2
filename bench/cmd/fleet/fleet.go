package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/bench/internal/childproc"
)

// member is one child process: one member of the fleet.
type member struct {
	*childproc.Proc
	idx   int
	name  string    // its gossip name, m<idx>
	url   string    // its control endpoints, http://127.0.0.1:port
	gaddr string    // its gossip address
	ready time.Time // when it printed READY

	// From its /lockraft/status once the fleet is formed.
	id     lockraft.MemberID
	role   string // lockraft.RoleVoter, RoleLearner or RoleLight
	leader bool

	dead bool // killed by a phase
}

// fleet is the children and where they keep their data and logs.
type fleet struct {
	self string // this executable, run again in child mode
	dir  string

	mu      sync.Mutex
	members []*member // by index; nil until started
}

// childArgs is the command line of member i's child.
func (f *fleet) childArgs(i int, seed string) []string {
	args := []string{"-child", "-dir", filepath.Join(f.dir, fmt.Sprintf("m%d", i)), "-name", fmt.Sprintf("m%d", i),
		"-learners", fmt.Sprint(*flagLearners), "-dead-voter-after", flagDeadVoter.String()}
	if seed != "" {
		args = append(args, "-seed", seed)
	}
	return args
}

// startOne starts member i's child and returns once it printed READY.
func (f *fleet) startOne(i int, seed string) (*member, error) {
	log := filepath.Join(f.dir, fmt.Sprintf("m%d.log", i))
	p, fields, err := childproc.Start(log, "READY", f.self, f.childArgs(i, seed)...)
	if err != nil {
		return nil, fmt.Errorf("member m%d did not start: %w", i, err)
	}
	m := &member{Proc: p, idx: i, name: fmt.Sprintf("m%d", i), ready: time.Now()}
	if len(fields) >= 2 {
		m.url, m.gaddr = fields[0], fields[1]
	} else {
		p.Kill()
		return nil, fmt.Errorf("member m%d: READY line without its addresses: %q", i, fields)
	}
	f.mu.Lock()
	f.members[i] = m
	f.mu.Unlock()
	return m, nil
}

// start starts size children: m0 first (its gossip address is everyone
// else's seed), then the rest batch at a time, concurrently within a batch.
func (f *fleet) start(size, batch int) error {
	f.members = make([]*member, size)
	m0, err := f.startOne(0, "")
	if err != nil {
		return err
	}
	for lo := 1; lo < size; lo += batch {
		hi := min(lo+batch, size)
		errs := make([]error, hi-lo)
		var wg sync.WaitGroup
		for i := lo; i < hi; i++ {
			wg.Go(func() { _, errs[i-lo] = f.startOne(i, m0.gaddr) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		progress("started %d of %d children", hi, size)
	}
	return nil
}

// all is every member started, dead ones included.
func (f *fleet) all() []*member {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ms []*member
	for _, m := range f.members {
		if m != nil {
			ms = append(ms, m)
		}
	}
	return ms
}

// alive is every member not killed by a phase.
func (f *fleet) alive() []*member {
	return slices.DeleteFunc(f.all(), func(m *member) bool { return m.dead })
}

// withRole is the live members of role (leader included among voters).
func (f *fleet) withRole(role string) []*member {
	return slices.DeleteFunc(f.alive(), func(m *member) bool { return m.role != role })
}

// leader is the member that led when the roles were last read.
func (f *fleet) leader() *member {
	for _, m := range f.alive() {
		if m.leader {
			return m
		}
	}
	return nil
}

// followerVoters is the live voters that do not lead.
func (f *fleet) followerVoters() []*member {
	return slices.DeleteFunc(f.withRole(lockraft.RoleVoter), func(m *member) bool { return m.leader })
}

// closeAll closes every live child's node and waits for it to exit (killing
// it after timeout); killed ones are only reaped.
func (f *fleet) closeAll(timeout time.Duration) {
	var ps []*childproc.Proc
	for _, m := range f.all() {
		ps = append(ps, m.Proc)
	}
	childproc.StopAll(ps, timeout)
}

// killAll kills every child at once (on an interrupt).
func (f *fleet) killAll() {
	var ps []*childproc.Proc
	for _, m := range f.all() {
		ps = append(ps, m.Proc)
	}
	childproc.KillAll(ps)
}

// waitFormed waits until every member is ready (/lockraft/readyz: a
// session and a known leader, so a Lock can be served) and the
// configuration has its voters and learners, and returns when that was
// first seen.
func (f *fleet) waitFormed(learners int, within time.Duration) (time.Time, error) {
	deadline := time.Now().Add(within)
	pending := f.all()
	lastNote := time.Now()
	for {
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("fleet not formed within %v: %d members not ready (first: %s)", within, len(pending), firstName(pending))
		}
		notReady := make([]bool, len(pending))
		forEach(len(pending), 16, func(i int) {
			code, _ := get(pending[i].url + "/lockraft/readyz")
			notReady[i] = code != 200
		})
		var still []*member
		for i, m := range pending {
			if notReady[i] {
				still = append(still, m)
			}
		}
		pending = still
		var roles map[string]int
		if len(pending) == 0 {
			if mv, err := membersView(f.members[0].url); err == nil {
				roles = countRoles(mv, 0)
				if roles[lockraft.RoleVoter] == founderCount && roles[lockraft.RoleLearner] == learners {
					return time.Now(), nil
				}
			}
		}
		if time.Since(lastNote) > 10*time.Second {
			lastNote = time.Now()
			if len(pending) > 0 {
				progress("%d of %d members ready (first not yet: %s)", len(f.members)-len(pending), len(f.members), pending[0].name)
			} else {
				progress("all members ready; configuration: %d voters, %d learners", roles[lockraft.RoleVoter], roles[lockraft.RoleLearner])
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// firstName is the name of ms[0] ("" if empty).
func firstName(ms []*member) string {
	if len(ms) == 0 {
		return ""
	}
	return ms[0].name
}

// readRoles reads every live member's role, raft id and leadership from
// its /lockraft/status.
func (f *fleet) readRoles() error {
	ms := f.alive()
	errs := make([]error, len(ms))
	forEach(len(ms), 16, func(i int) {
		var st lockraft.StatusView
		code, body := get(ms[i].url + "/lockraft/status")
		if code != 200 {
			errs[i] = fmt.Errorf("%s: status %d %s", ms[i].name, code, body)
			return
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			errs[i] = fmt.Errorf("%s: status: %w", ms[i].name, err)
			return
		}
		ms[i].id, ms[i].role, ms[i].leader = st.ID, st.Role, st.IsLeader
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if f.leader() == nil {
		return fmt.Errorf("no member says it leads")
	}
	return nil
}

// byID is the member whose raft id is id (nil if none).
func (f *fleet) byID(id lockraft.MemberID) *member {
	for _, m := range f.all() {
		if m.id == id {
			return m
		}
	}
	return nil
}

// membersView is GET /lockraft/members on the member at url.
func membersView(url string) (lockraft.MembersView, error) {
	var mv lockraft.MembersView
	code, body := get(url + "/lockraft/members")
	if code != 200 {
		return mv, fmt.Errorf("members: %d %s", code, body)
	}
	return mv, json.Unmarshal([]byte(body), &mv)
}

// countRoles counts the members of mv by role, leaving out the member
// without (0: none).
func countRoles(mv lockraft.MembersView, without lockraft.MemberID) map[string]int {
	c := map[string]int{}
	for _, m := range mv.Members {
		if m.ID != without || without == 0 {
			c[m.Role]++
		}
	}
	return c
}

// forEach runs fn(0) … fn(n-1) on at most workers goroutines and waits.
func forEach(n, workers int, fn func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// get fetches url with a 5 s timeout: the status and the body.
func get(url string) (int, string) { return childproc.Get(url, 5*time.Second) }
