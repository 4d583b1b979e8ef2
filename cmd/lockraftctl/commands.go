package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lockraft/lockraft"
)

func (c *cli) table() *tabwriter.Writer { return tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0) }

func (c *cli) status() error {
	var s lockraft.StatusView
	if printed, err := c.get("GET", lockraft.AdminStatusPath, nil, &s); err != nil || printed {
		return err
	}
	role := clean(s.Role)
	if s.IsLeader {
		role += ", leader"
	}
	leader := "none known"
	if s.Leader != 0 {
		leader = s.Leader.String()
	}
	ready := "no"
	if s.Ready {
		ready = fmt.Sprintf("yes (session %d)", s.Session)
	}
	w := c.table()
	fmt.Fprintf(w, "node\t%s (%s)\n", s.ID, role)
	fmt.Fprintf(w, "leader\t%s\n", leader)
	fmt.Fprintf(w, "ready\t%s\n", ready)
	fmt.Fprintf(w, "raft\tterm %d, commit %d, applied %d\n", s.Term, s.Commit, s.Applied)
	fmt.Fprintf(w, "locks\t%d held, %d waiters (longest queue %d), %d sessions\n", s.LocksHeld, s.Waiters, s.Longest, s.Sessions)
	fmt.Fprintf(w, "address\t%s", clean(s.Addr))
	if s.GossipAddr != "" {
		fmt.Fprintf(w, " (gossip %s)", clean(s.GossipAddr))
	}
	fmt.Fprintf(w, "\nversion\t%s\n", clean(s.Version))
	return w.Flush()
}

func (c *cli) members() error {
	var v lockraft.MembersView
	if printed, err := c.get("GET", lockraft.AdminMembersPath, nil, &v); err != nil || printed {
		return err
	}
	w := c.table()
	fmt.Fprintln(w, "ID\tNAME\tROLE\tLEADER\tHEALTHY\tLAG\tRAFT ADDRESS\tGOSSIP")
	for _, m := range v.Members {
		lag := "?"
		if m.LagKnown {
			lag = strconv.FormatUint(m.Lag, 10)
		} else if m.Role == lockraft.RoleLight || m.Role == lockraft.RoleRemoved {
			lag = "-"
		}
		gossip := clean(m.Gossip)
		if gossip == "" {
			gossip = "-"
		} else if m.GossipAddr != "" {
			gossip += " " + clean(m.GossipAddr)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, dash(clean(m.GossipName)), clean(m.Role), yes(m.Leader),
			yes(m.Healthy), lag, dash(clean(m.RaftAddr)), gossip)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if !v.FromLeader {
		fmt.Fprintf(c.out, "(answered by %s, which is not the leader: health is gossip only, lag unknown)\n", clean(v.ServedBy.String()))
	}
	for _, m := range v.Members {
		if m.Role == lockraft.RoleRemoved {
			fmt.Fprintln(c.out, "(removed: no longer in the raft configuration but still in gossip; it serves nothing: stop it, or restart it with a fresh data directory to join as a new member)")
			break
		}
	}
	return nil
}

func (c *cli) locks(prefix string) error {
	var all []lockraft.LockView
	after, next := "", ""
	for len(all) < c.limit {
		q := url.Values{"prefix": {prefix}, "limit": {strconv.Itoa(min(c.limit-len(all), lockraft.MaxPageLimit))}}
		if after != "" {
			q.Set("after", after)
		}
		body, err := c.call("GET", lockraft.AdminLocksPath, q)
		if err != nil {
			return err
		}
		var p lockraft.LocksPage
		if err := json.Unmarshal(body, &p); err != nil {
			return &unreachableError{c.endpoint, fmt.Errorf("bad JSON: %v", err)}
		}
		all = append(all, p.Locks...)
		next = p.Next
		if next == "" {
			break
		}
		after = next
	}
	if c.output == "json" {
		b, err := json.MarshalIndent(lockraft.LocksPage{Locks: all, Next: next}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.out, "%s\n", cleanJSON(b))
		return err
	}
	if len(all) == 0 {
		fmt.Fprintf(c.out, "no lock held or waited for under %s\n", strconv.Quote(prefix))
		return nil
	}
	w := c.table()
	fmt.Fprintln(w, "NAME\tHOLDER\tMEMBER\tTOKEN\tHELD FOR\tWAITERS")
	for _, l := range all {
		if l.Holder == nil {
			state := "(free)"
			if l.Delayed {
				state = "(lock-delay)"
			}
			fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t%d\n", clean(l.Name), state, len(l.Waiters))
			continue
		}
		holder := clean(l.Holder.Owner)
		if len(l.Holds) > 1 {
			holder += fmt.Sprintf(" (+%d more)", len(l.Holds)-1) // readers, permits: `lock NAME` lists them
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\n", clean(l.Name), holder, l.Holder.Member, l.Holder.Token, since(l.Holder.GrantedAt), len(l.Waiters))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(c.out, "(more after %s: raise -limit)\n", strconv.Quote(next))
	}
	return nil
}

func (c *cli) lock(name string) error {
	var v lockraft.LockView
	printed, err := c.get("GET", lockraft.AdminLockPath, url.Values{"name": {name}}, &v)
	if se, ok := err.(*serverError); ok && se.status == 404 && se.code == "not_found" {
		if c.output == "json" {
			b, err := json.Marshal(map[string]any{"name": name, "free": true})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.out, "%s\n", cleanJSON(b))
			return err
		}
		fmt.Fprintf(c.out, "%s is free: nobody holds or waits for it\n", clean(name))
		return nil
	}
	if err != nil || printed {
		return err
	}
	if catalogueView(v) {
		return c.catalogueLock(v)
	}
	fmt.Fprintln(c.out, clean(v.Name))
	w := c.table()
	if h := v.Holder; h != nil {
		lease := "lives as long as its session"
		if h.LeaseMillis > 0 {
			lease = fmt.Sprintf("own lease %v", time.Duration(h.LeaseMillis)*time.Millisecond)
		}
		if !h.ExpiresAt.IsZero() {
			lease += fmt.Sprintf(", expires in %v unless renewed", time.Until(h.ExpiresAt).Round(time.Millisecond))
		}
		fmt.Fprintf(w, "  holder\t%s on member %s (session %d)\n", clean(h.Owner), h.Member, h.Session)
		fmt.Fprintf(w, "  token\t%d (the granting entry's index)\n", h.Token)
		fmt.Fprintf(w, "  held for\t%s (hold count %d)\n", since(h.GrantedAt), h.HoldCount)
		fmt.Fprintf(w, "  lease\t%s\n", lease)
	} else if v.Delayed {
		fmt.Fprintf(w, "  holder\tnone: in its lock-delay after a holder's session expired\n")
	}
	fmt.Fprintf(w, "  waiters\t%d\n", len(v.Waiters))
	if err := w.Flush(); err != nil {
		return err
	}
	if len(v.Waiters) > 0 {
		w := c.table()
		fmt.Fprintln(w, "  #\tOWNER\tMEMBER\tSESSION\tENQUEUED AT INDEX\tWAITING FOR")
		for _, q := range v.Waiters {
			fmt.Fprintf(w, "  %d\t%s\t%s\t%d\t%d\t%s\n", q.Position, clean(q.Owner), q.Member, q.Session, q.Enqueued, since(q.EnqueuedAt))
		}
		return w.Flush()
	}
	return nil
}

// catalogueView reports whether v needs the catalogue's layout: a
// read-write lock, semaphore or election, or a multi-name lock's name. A
// plain mutex keeps the one-holder layout.
func catalogueView(v lockraft.LockView) bool {
	if v.Primitive != "" && v.Primitive != "mutex" {
		return true
	}
	for _, h := range v.Holds {
		if len(h.Names) > 0 {
			return true
		}
	}
	for _, q := range v.Waiters {
		if len(q.Names) > 0 {
			return true
		}
	}
	return false
}

// request is what a hold or waiter of the catalogue asks for, in one cell.
func request(mode string, permits uint32, value string, names []string) string {
	var parts []string
	if mode != "" {
		parts = append(parts, clean(mode))
	}
	if permits > 0 {
		parts = append(parts, fmt.Sprintf("%d permits", permits))
	}
	if value != "" {
		parts = append(parts, fmt.Sprintf("value %q", value))
	}
	if len(names) > 0 {
		parts = append(parts, "names "+strings.Join(cleans(names), ","))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// catalogueLock prints a name of the lock catalogue: every hold and every
// waiter with what it holds or asks for.
func (c *cli) catalogueLock(v lockraft.LockView) error {
	prim := clean(v.Primitive)
	if prim == "" || prim == "mutex" {
		prim = "multi-name mutex"
	}
	fmt.Fprintf(c.out, "%s (%s)\n", clean(v.Name), prim)
	w := c.table()
	switch v.Primitive {
	case "semaphore":
		fmt.Fprintf(w, "  permits\t%d in use of %d\n", v.PermitsInUse, v.Permits)
	case "election":
		if len(v.Holds) > 0 {
			fmt.Fprintf(w, "  value\t%q\n", v.Value)
		}
	}
	if len(v.Holds) == 0 && v.Delayed {
		fmt.Fprintf(w, "  holds\tnone: in its lock-delay after a holder's session expired\n")
	} else {
		fmt.Fprintf(w, "  holds\t%d\n", len(v.Holds))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(v.Holds) > 0 {
		w := c.table()
		fmt.Fprintln(w, "  #\tOWNER\tMEMBER\tSESSION\tHOLDS\tTOKEN\tHELD FOR\tLEASE")
		for i, h := range v.Holds {
			lease := "session"
			if h.LeaseMillis > 0 {
				lease = (time.Duration(h.LeaseMillis) * time.Millisecond).String()
			}
			if !h.ExpiresAt.IsZero() {
				lease += fmt.Sprintf(" (expires in %v)", time.Until(h.ExpiresAt).Round(time.Millisecond))
			}
			fmt.Fprintf(w, "  %d\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", i+1, clean(h.Owner), h.Member, h.Session,
				request(h.Mode, h.Permits, "", h.Names), h.Token, since(h.GrantedAt), lease)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.out, "  waiters %d\n", len(v.Waiters))
	if len(v.Waiters) > 0 {
		w := c.table()
		fmt.Fprintln(w, "  #\tOWNER\tMEMBER\tSESSION\tASKS FOR\tENQUEUED AT INDEX\tWAITING FOR")
		for _, q := range v.Waiters {
			fmt.Fprintf(w, "  %d\t%s\t%s\t%d\t%s\t%d\t%s\n", q.Position, clean(q.Owner), q.Member, q.Session,
				request(q.Mode, q.Permits, q.Value, q.Names), q.Enqueued, since(q.EnqueuedAt))
		}
		return w.Flush()
	}
	return nil
}

func (c *cli) transfer(to string) error {
	q := url.Values{}
	if to != "" {
		q.Set("to", to)
	}
	var out struct {
		Leader lockraft.MemberID `json:"leader"`
	}
	if printed, err := c.get("POST", lockraft.AdminTransferPath, q, &out); err != nil || printed {
		return err
	}
	_, err := fmt.Fprintf(c.out, "leader is now %s\n", out.Leader)
	return err
}

func (c *cli) remove(id string) error {
	var out struct {
		Removed lockraft.MemberID `json:"removed"`
	}
	if printed, err := c.get("POST", lockraft.AdminRemovePath, url.Values{"id": {id}}, &out); err != nil || printed {
		return err
	}
	_, err := fmt.Fprintf(c.out, "removed %s from the raft configuration\n", out.Removed)
	return err
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// since renders how long ago t was ("?" when unknown).
func since(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := time.Since(t)
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	return s
}
