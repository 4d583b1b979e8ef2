package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/bench/internal/childproc"
)

// member is one member of the fleet: a child process of its own, or one
// of the light members that share a process (-per-process).
type member struct {
	*childproc.Proc
	perProc int // members in its process: the process's CPU, RSS and wake-ups are shared by as many
	idx     int
	name    string    // its gossip name, m<idx>
	url     string    // its control endpoints, http://127.0.0.1:port
	gaddr   string    // its gossip address
	ready   time.Time // when it printed READY

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

// childArgs is the command line of the child that runs members idxs.
func (f *fleet) childArgs(idxs []int, seed string) []string {
	var names []string
	for _, i := range idxs {
		names = append(names, fmt.Sprintf("m%d", i))
	}
	args := []string{"-child", "-dir", f.dir, "-names", strings.Join(names, ","),
		"-learners", fmt.Sprint(*flagLearners), "-dead-voter-after", flagDeadVoter.String()}
	if seed != "" {
		args = append(args, "-seed", seed)
	}
	return args
}

// startProc starts the child of members idxs and returns once each printed
// its READY line.
func (f *fleet) startProc(idxs []int, seed string) error {
	log := filepath.Join(f.dir, fmt.Sprintf("m%d.log", idxs[0]))
	path, args := f.self, f.childArgs(idxs, seed)
	if idxs[0] >= *flagOwn && *flagLightNice > 0 {
		// The shared processes of light members run niced, so the voters,
		// which in a fleet have machines of their own, are not starved of
		// this machine's two cores by hundreds of members' gossip.
		path, args = "nice", append([]string{"-n", fmt.Sprint(*flagLightNice), f.self}, args...)
	}
	p, fields, err := childproc.Start(log, "READY", path, args...)
	if err != nil {
		return fmt.Errorf("members from m%d did not start: %w", idxs[0], err)
	}
	byName := map[string]*member{}
	for range idxs {
		if fields == nil {
			if fields, err = p.Line("READY"); err != nil {
				p.Kill()
				return fmt.Errorf("members from m%d: %w", idxs[0], err)
			}
		}
		if len(fields) < 3 {
			p.Kill()
			return fmt.Errorf("members from m%d: READY line without a name and addresses: %q", idxs[0], fields)
		}
		byName[fields[0]] = &member{Proc: p, perProc: len(idxs), name: fields[0], url: fields[1], gaddr: fields[2], ready: time.Now()}
		fields = nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, i := range idxs {
		m := byName[fmt.Sprintf("m%d", i)]
		if m == nil {
			p.Kill()
			return fmt.Errorf("member m%d printed no READY line", i)
		}
		m.idx = i
		f.members[i] = m
	}
	return nil
}

// start starts size members: m0 first (its gossip address is everyone
// else's seed), then m1 … m<own-1> one to a process, then the rest
// perProc to a process; batch processes at a time, concurrently within a
// batch.
func (f *fleet) start(size, batch, own, perProc int) error {
	f.members = make([]*member, size)
	if err := f.startProc([]int{0}, ""); err != nil {
		return err
	}
	seed := f.members[0].gaddr
	var groups [][]int
	for i := 1; i < size; {
		n := 1
		if i >= own {
			n = max(perProc, 1)
		}
		var g []int
		for ; n > 0 && i < size; n-- {
			g = append(g, i)
			i++
		}
		groups = append(groups, g)
	}
	for lo := 0; lo < len(groups); lo += batch {
		hi := min(lo+batch, len(groups))
		errs := make([]error, hi-lo)
		var wg sync.WaitGroup
		for k := lo; k < hi; k++ {
			wg.Go(func() { errs[k-lo] = f.startProc(groups[k], seed) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		last := groups[hi-1]
		progress("started %d of %d members (%d processes)", last[len(last)-1]+1, size, hi+1)
	}
	return nil
}

// procs is the distinct processes of ms.
func procs(ms []*member) []*childproc.Proc {
	var ps []*childproc.Proc
	for _, m := range ms {
		if !slices.Contains(ps, m.Proc) {
			ps = append(ps, m.Proc)
		}
	}
	return ps
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
	childproc.StopAll(procs(f.all()), timeout)
}

// killAll kills every child at once (on an interrupt).
func (f *fleet) killAll() {
	childproc.KillAll(procs(f.all()))
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
