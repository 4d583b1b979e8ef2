package lockfsm

// The fuzz stream generator: three bytes per command (an operation and two parameters) over a few
// sessions, owners and names — mutexes a, b, c (also taken together by multi-name acquires), read-write
// lock r, semaphore s (3 permits), election e — with retries (reused sequence numbers), acknowledgements,
// cancels of past and future seqs, expiries with and without lock-delay, version-1 entries and malformed
// ones. Now and then a command names a name of another kind (ErrWrongKind) or breaks a bound.
//
// The generator looks at the state machine it feeds (before each command) so that releases, lease expiries
// and lifts can name real holds and delays as well as stale ones. The i-th command gets index i+1.

var (
	genOwners = []string{"o1", "o2", "o3"}
	genValues = []string{"", "v1", "v2"}
	genAny    = []string{"a", "b", "r", "s", "e", "c"}
)

type gen struct {
	f        *FSM
	sessions []uint64 // every session id opened (maybe ended since)
	seqs     map[uint64]uint64
}

// genApply generates commands from data, applying each (encoded, as raft carries it) to f, with the
// checker k (nil: none) looking at every step. It stops at the first violation.
func genApply(data []byte, f *FSM, k *checker) ([]Command, [][]byte, error) {
	g := &gen{f: f, seqs: map[uint64]uint64{}}
	var cmds []Command
	var entries [][]byte
	var ev []Event
	for i := 0; i+2 < len(data) && len(cmds) < 400; i += 3 {
		index := uint64(len(cmds) + 1)
		c := g.next(index, data[i], data[i+1], data[i+2])
		b := c.AppendEncode(nil)
		var r Result
		r, ev = f.Apply(index, b, ev[:0])
		cmds = append(cmds, c)
		entries = append(entries, b)
		if k != nil {
			if err := k.step(f, index, &c, r, ev); err != nil {
				return cmds, entries, err
			}
		}
	}
	return cmds, entries, nil
}

// genCommands is the command stream genApply makes from data (on a state machine of its own).
func genCommands(data []byte) []Command {
	cmds, _, _ := genApply(data, memFSM(), nil)
	return cmds
}

func (g *gen) next(index uint64, op, p, q byte) Command {
	var c Command
	live := g.f.Sessions()
	pick := func() uint64 {
		if len(live) > 0 && p&0x88 != 0x88 {
			return live[int(p>>4)%len(live)].Session
		}
		if len(g.sessions) == 0 {
			return 1
		}
		return g.sessions[int(p>>4)%len(g.sessions)] // maybe ended
	}
	wrong := q&0xc0 == 0xc0 // a quarter of commands name a name of any kind
	name := func(home string) string {
		if wrong {
			return genAny[int(p>>2)%len(genAny)]
		}
		return home
	}
	seqCmd := func(k Kind, n string) {
		c.Kind, c.Session = k, pick()
		c.Owner = genOwners[int(q>>2)%len(genOwners)]
		if li, ok := g.f.Lock(n); ok && len(li.Holds) > 0 && (k == KindRelease || k == KindProclaim) && q&2 != 0 {
			// Most releases and proclaims come from a holder.
			h := li.Holds[int(q>>4)%len(li.Holds)]
			c.Session, c.Owner = h.Session, h.Owner
			if k == KindRelease {
				c.Mode = h.Mode
			}
		}
		g.seqs[c.Session]++
		c.Seq = g.seqs[c.Session]
		if p&1 != 0 && c.Seq > 2 { // a retry of an earlier seq
			c.Seq -= uint64(p>>1)%3 + 1
		}
		if p&0x40 != 0 && c.Seq > 4 {
			c.AckedBelow = c.Seq - 3
		}
		c.Name = n
	}
	mutex := string("abc"[int(q)%3])
	wait := p&2 != 0
	lease := uint64(q&1) * 100
	switch op % 17 {
	case 0:
		c = Command{Kind: KindOpenSession, Node: uint64(p % 3), TTLMillis: 1000}
		if len(live) < 4 {
			g.sessions = append(g.sessions, index)
		} else {
			c.Kind = KindNoop
		}
	case 1, 2:
		seqCmd(KindAcquire, name(mutex))
		c.Wait, c.MaxHolds, c.LeaseMillis = op%17 == 1, uint32(p%3+1), lease
	case 3:
		seqCmd(KindRelease, name(mutex))
	case 4:
		seqCmd(KindAcquire, mutex)
		for i := 1; i <= 1+int(p>>5)%2; i++ {
			c.ExtraNames = append(c.ExtraNames, string("abc"[(int(q)+i)%3]))
		}
		if wrong {
			c.ExtraNames = append(c.ExtraNames, genAny[int(p>>2)%len(genAny)]) // maybe a repeat or another kind
		}
		c.Wait, c.MaxHolds, c.LeaseMillis = wait, uint32(p%3+1), lease
	case 5:
		seqCmd(KindAcquire, name("r"))
		c.Primitive, c.Mode = PrimRW, Mode(p>>5&1)
		c.Wait, c.MaxHolds, c.LeaseMillis = wait, uint32(p%3+1), lease
	case 6:
		c.Mode = Mode(p >> 5 & 1)
		seqCmd(KindRelease, name("r"))
		c.Primitive = PrimRW
	case 7:
		seqCmd(KindAcquire, name("s"))
		c.Primitive, c.Limit, c.Permits = PrimSemaphore, 3, uint32(p>>5)%4
		if q&0x30 == 0x30 {
			c.Limit = uint32(p>>6) + 1 // 1..4: mostly a mismatch, sometimes Permits > Limit
		}
		c.Wait, c.LeaseMillis = wait, lease
	case 8:
		seqCmd(KindRelease, name("s"))
		c.Primitive = PrimSemaphore
		c.Token = g.holdToken(c.Name, c.Session, c.Owner, q&0x20 != 0, index)
	case 9:
		seqCmd(KindAcquire, name("e"))
		c.Primitive, c.Value = PrimElection, genValues[int(p>>5)%len(genValues)]
		c.Wait, c.LeaseMillis = wait, lease
	case 10:
		if p&0x20 != 0 {
			seqCmd(KindProclaim, name("e"))
			c.Value = genValues[int(p>>6)%len(genValues)]
			if q&0x20 != 0 {
				c.Token = g.holdToken(c.Name, c.Session, c.Owner, q&0x10 != 0, index)
			}
		} else {
			seqCmd(KindRelease, name("e"))
			c.Primitive = PrimElection
		}
	case 11:
		seqCmd(KindCancel, genAny[int(q>>4)%len(genAny)])
		c.Target = g.seqs[c.Session] - min(g.seqs[c.Session], uint64(p%4))
		if p%5 == 0 {
			c.Target = g.seqs[c.Session] + 1 // not applied yet: tombstone
		}
		if li, ok := g.f.Lock(c.Name); ok && q&3 != 0 {
			// Aim at a real waiter or hold of this session (a cancel racing a grant, or undoing one).
			for _, w := range li.Waiters {
				if w.Session == c.Session && q&1 != 0 {
					c.Owner, c.Target = w.Owner, w.Seq
				}
			}
			for _, h := range li.Holds {
				if h.Session == c.Session && h.GrantSeq != 0 && q&2 != 0 {
					c.Owner, c.Target = h.Owner, h.GrantSeq
				}
			}
		}
		if p&0x80 != 0 {
			// The node knew the target's outcome (say Queued) and acknowledged it: its result is gone.
			c.AckedBelow = c.Target + 1
		}
	case 12:
		c = Command{Kind: KindCloseSession, Session: pick()}
		if q&3 == 1 {
			// A leader's session checkpoint (changes no lock): one or two marks, live or silent, maybe of an
			// ended or unknown session.
			c = Command{Kind: KindCheckpoint, Token: uint64(p % 5), Seq: uint64(p % 7),
				Checkpoints: []Checkpoint{{Session: pick(), Live: p&1 != 0, SilenceMillis: uint64(p&1^1) * uint64(p)}}}
			if p&2 != 0 {
				c.Checkpoints = append(c.Checkpoints, Checkpoint{Session: pick() + uint64(p&4), Live: true})
			}
		} else if ending := g.f.Ending(); q&3 != 0 && len(ending) > 0 && q&4 != 0 {
			// The leader's next run of a session's end (or one for a session that is not ending).
			c = Command{Kind: KindEndSessionRun, Session: ending[int(p)%len(ending)], Limit: uint32(p>>5) % 4}
			if q&8 != 0 {
				c.Session = pick()
			}
		} else if q&3 != 0 {
			c = Command{Kind: KindNoop} // sessions live long enough to build queues
		} else if p&1 != 0 {
			c.Kind, c.LockDelayMillis = KindExpireSession, uint64(p&2)*50
		}
		if c.Kind == KindCloseSession || c.Kind == KindExpireSession {
			// Version 3: in runs of one to three names (or the whole session, limit 0).
			c.Limit = uint32(q>>5) % 4
		}
	case 13:
		// A lease expiry of a real hold (naming its session and owner, or not) or a stale one.
		c = Command{Kind: KindExpireLease, Name: genAny[int(q)%len(genAny)], Token: index - min(index, uint64(q>>3))}
		if li, ok := g.f.Lock(c.Name); ok && len(li.Holds) > 0 && p&0x80 == 0 {
			h := li.Holds[int(p>>2)%len(li.Holds)]
			c.Token = h.Token
			if p&2 != 0 {
				c.Session, c.Owner = h.Session, h.Owner
			}
		}
	case 14:
		c = Command{Kind: KindLiftDelay, Name: genAny[int(q)%len(genAny)], Token: index - min(index, uint64(q>>3))}
		if li, ok := g.f.Lock(c.Name); ok && li.Delayed && p&0x80 == 0 {
			c.Token = li.DelayToken
		}
	case 15:
		// Version-1 entries: the mutex as before, and the reserved fields refused as before.
		seqCmd(KindAcquire+Kind(p>>7), mutex)
		c.Version, c.Wait = 1, wait
		switch (q >> 4) % 4 {
		case 1:
			c.Mode = ModeShared
		case 2:
			c.Permits = 2
		case 3:
			c.ExtraNames = []string{"b"}
		}
	case 16:
		// Malformed (kind 0): applied as a no-op everywhere.
		c = Command{Node: uint64(p)}
	}
	return c
}

// holdToken is the token of a hold of (session, owner) on name (stale: an older index) for releases and
// proclaims.
func (g *gen) holdToken(name string, session uint64, owner string, stale bool, index uint64) uint64 {
	if li, ok := g.f.Lock(name); ok && !stale {
		for _, h := range li.Holds {
			if h.Session == session && h.Owner == owner {
				return h.Token
			}
		}
	}
	return index / 2
}
