//go:build ignore

// Command gen writes the old-format fixtures of lockfsm/testdata/compat with lockfsm as of main 7768215
// (version-1 commands, version-2 lock and session records, version-2 snapshots). It must be built against
// that version of the package, not the current one; see ../README.md.
package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/lockraft/lockraft/lockfsm"
)

// commands is that version's fuzz generator (genCommands in fuzz_test.go), fed with seeded random bytes,
// changed to keep up to four sessions alive and close them less often, plus entries using the fields
// version 1 reserved and malformed ones.
func commands() []lockfsm.Command {
	r := rand.New(rand.NewPCG(42, 18))
	data := make([]byte, 900)
	for i := range data {
		data[i] = byte(r.IntN(256))
	}
	names := []string{"a", "b", "c"}
	owners := []string{"o1", "o2"}
	var cmds []lockfsm.Command
	var sessions []uint64 // live sessions
	seqs := map[uint64]uint64{}
	var tokens []uint64
	for i := 0; i+1 < len(data) && len(cmds) < 440; i += 2 {
		op, p := data[i]%12, data[i+1]
		index := uint64(len(cmds) + 1)
		c := lockfsm.Command{}
		pick := func() uint64 {
			if len(sessions) == 0 {
				return 1
			}
			return sessions[int(p>>4)%len(sessions)]
		}
		seqCmd := func(k lockfsm.Kind) {
			c.Kind, c.Session = k, pick()
			seqs[c.Session]++
			c.Seq = seqs[c.Session]
			if p&1 != 0 && c.Seq > 2 {
				c.Seq -= uint64(p>>1)%3 + 1
			}
			if p&0x40 != 0 && c.Seq > 4 {
				c.AckedBelow = c.Seq - 3
			}
			c.Name = names[int(p>>2)%len(names)]
			c.Owner = owners[int(p>>3)%len(owners)]
		}
		switch op {
		case 0:
			c = lockfsm.Command{Kind: lockfsm.KindOpenSession, Node: uint64(p % 3), TTLMillis: 1000}
			if len(sessions) < 4 {
				sessions = append(sessions, index)
			} else {
				c.Kind = lockfsm.KindNoop
			}
		case 1, 2, 3:
			seqCmd(lockfsm.KindAcquire)
			c.Wait = op != 3
			c.MaxHolds = uint32(p%3 + 1)
			c.LeaseMillis = uint64(p%2) * 100
		case 4, 5:
			seqCmd(lockfsm.KindRelease)
		case 6:
			seqCmd(lockfsm.KindCancel)
			c.Target = seqs[c.Session] - uint64(p%4)
			if p%5 == 0 {
				c.Target = seqs[c.Session] + 1
			}
			if p&0x80 != 0 {
				c.AckedBelow = c.Target + 1
			}
		case 7:
			if p&0x0c != 0 {
				c = lockfsm.Command{Kind: lockfsm.KindNoop}
				break
			}
			c = lockfsm.Command{Kind: lockfsm.KindCloseSession, Session: pick()}
			if p&1 != 0 {
				c.Kind, c.LockDelayMillis = lockfsm.KindExpireSession, uint64(p&2)*50
			}
			for j, s := range sessions {
				if s == c.Session {
					sessions = append(sessions[:j:j], sessions[j+1:]...)
					break
				}
			}
		case 8:
			c = lockfsm.Command{Kind: lockfsm.KindExpireLease, Name: names[int(p)%len(names)]}
			if len(tokens) > 0 {
				c.Token = tokens[int(p>>2)%len(tokens)]
			}
		case 9:
			c = lockfsm.Command{Kind: lockfsm.KindLiftDelay, Name: names[int(p)%len(names)]}
			if len(tokens) > 0 {
				c.Token = tokens[int(p>>2)%len(tokens)]
			}
		case 10:
			// The fields version 1 reserved: refused with ErrUnsupported.
			seqCmd(lockfsm.KindAcquire)
			switch p % 3 {
			case 0:
				c.Mode = lockfsm.ModeShared
			case 1:
				c.Permits = 2
			case 2:
				c.ExtraNames = []string{"b"}
			}
		case 11:
			c = lockfsm.Command{Kind: lockfsm.Kind(p%3) * 99} // kind 0, 99, 198: malformed
		}
		tokens = append(tokens, index)
		cmds = append(cmds, c)
	}
	return cmds
}

func formatResult(index uint64, r lockfsm.Result, ev []lockfsm.Event) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d: err=%v status=%d token=%d holds=%d pos=%d holder=%d/%s session=%d dup=%v\n", index,
		r.Err, r.Status, r.Token, r.HoldCount, r.Position, r.Holder.Session, r.Holder.Owner, r.Session, r.Duplicate)
	for _, e := range ev {
		fmt.Fprintf(&sb, "  %d %s s=%d owner=%s seq=%d token=%d lease=%d ttl=%d delay=%d node=%d reason=%d queue=%v\n",
			e.Kind, e.Name, e.Session, e.Owner, e.Seq, e.Token, e.LeaseMillis, e.TTLMillis, e.DelayMillis, e.Node,
			e.Reason, e.FromQueue)
	}
	return sb.String()
}

func snapshot(f *lockfsm.FSM) []byte {
	var b bytes.Buffer
	if err := f.WriteSnapshot(&b); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func main() {
	dir := os.Args[1]
	cmds := commands()
	f, err := lockfsm.Open(filepath.Join(dir, "state-v2.db"), lockfsm.Options{})
	if err != nil {
		panic(err)
	}
	var entries, results []byte
	for i := range cmds {
		index := uint64(i + 1)
		data := cmds[i].AppendEncode(nil)
		entries = binary.AppendUvarint(entries, uint64(len(data)))
		entries = append(entries, data...)
		r, ev := f.Apply(index, data, nil)
		results = append(results, formatResult(index, r, ev)...)
		switch index {
		case uint64(len(cmds) / 2):
			must(os.WriteFile(filepath.Join(dir, "snapshot-half-v2.bin"), snapshot(f), 0o644))
		case uint64(2 * len(cmds) / 3):
			must(f.Commit()) // the file stays at this index; the test replays the rest
		}
	}
	must(os.WriteFile(filepath.Join(dir, "snapshot-v2.bin"), snapshot(f), 0o644))
	must(os.WriteFile(filepath.Join(dir, "entries-v1.bin"), entries, 0o644))
	must(os.WriteFile(filepath.Join(dir, "results-v1.txt"), results, 0o644))
	must(f.Close())
	var locks strings.Builder
	for _, l := range f.Locks() {
		fmt.Fprintf(&locks, "%+v\n", l)
	}
	fmt.Print(locks.String())
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
