package membership

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"net"
	"regexp"

	"github.com/lockraft/lockraft/internal/refuse"
)

// slogWriter adapts memberlist's *log.Logger output ("[LEVEL] memberlist: msg")
// to slog, mapping DEBUG/INFO/WARN/ERR to slog levels and tagging each record
// with lockraft_component=memberlist.
//
// memberlist logs every packet or stream it refuses (wrong key, another
// cluster's label, garbage) at WARN or ERR with the sender ("from=ip:port"):
// one line per packet, so anyone who can reach the gossip port could fill
// the log. Those lines go through a refuse.Log instead: logged once per kind
// and sender address per interval, the rest counted.
type slogWriter struct {
	l       *slog.Logger
	refused *refuse.Log
}

func newStdLogger(l *slog.Logger, refused *refuse.Log) *log.Logger {
	return log.New(slogWriter{l: l.With("lockraft_component", "memberlist"), refused: refused}, "", 0)
}

// fromRE finds memberlist's LogAddress/LogConn suffix.
var fromRE = regexp.MustCompile(`\s*from=(\S+)`)

func (w slogWriter) Write(p []byte) (int, error) {
	msg := bytes.TrimRight(p, "\n")
	level := slog.LevelInfo
	for _, lv := range []struct {
		tag   string
		level slog.Level
	}{
		{"[DEBUG]", slog.LevelDebug},
		{"[INFO]", slog.LevelInfo},
		{"[WARN]", slog.LevelWarn},
		{"[ERR]", slog.LevelError},
		{"[ERROR]", slog.LevelError},
	} {
		if bytes.HasPrefix(msg, []byte(lv.tag)) {
			level = lv.level
			msg = bytes.TrimSpace(msg[len(lv.tag):])
			break
		}
	}
	msg = bytes.TrimPrefix(msg, []byte("memberlist: "))
	if bytes.HasPrefix(msg, []byte("ignoring alive message for")) {
		level = slog.LevelDebug // already logged once at Warn by delegate.check
	}
	if level >= slog.LevelWarn && routine(msg) {
		level = slog.LevelDebug
	}
	if level >= slog.LevelWarn && peerDown(msg) {
		// A peer that does not answer (stopped, restarting, cut off) or
		// memberlist's goroutines racing its own Shutdown: the failure
		// detector turns the former into a member state change, which is
		// what is logged and acted on; each failed packet is not news.
		level = slog.LevelDebug
	}
	if level >= slog.LevelWarn && w.refused != nil {
		if loc := fromRE.FindSubmatchIndex(msg); loc != nil {
			addr := string(msg[loc[2]:loc[3]])
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			// The kind is the message's first words: what follows may be
			// the sender's (a label, a node name).
			head, _, _ := bytes.Cut(msg[:loc[0]], []byte(":"))
			words := bytes.Fields(head)
			kind := bytes.Join(words[:min(len(words), 4)], []byte(" "))
			w.refused.Refuse("gossip: "+string(kind), host, "detail", string(msg))
			return len(p), nil
		}
	}
	if w.l.Enabled(context.Background(), level) {
		w.l.Log(context.Background(), level, string(msg))
	}
	return len(p), nil
}

// routineMarks begin memberlist's WARN lines about what happens in every
// rolling restart: a member that was slow to answer a probe, or restarted,
// hears it is suspected or dead and refutes it with a higher incarnation.
// That is the failure detector working; a member that really fails shows
// as a state change, which is what is logged at INFO and acted on.
var routineMarks = [][]byte{
	[]byte("Refuting a suspect message"), []byte("Refuting a dead message"),
}

// routine reports whether a memberlist WARN line is one of routineMarks.
func routine(msg []byte) bool {
	for _, m := range routineMarks {
		if bytes.HasPrefix(msg, m) {
			return true
		}
	}
	return false
}

// peerDownMarks are the network errors of a peer that does not answer.
var peerDownMarks = [][]byte{
	[]byte("connection refused"), []byte("i/o timeout"), []byte("connection reset"), []byte("no route to host"),
	[]byte("broken pipe"), []byte("use of closed network connection"), []byte("network is unreachable"),
}

// peerDown reports whether a memberlist error line is about a peer that did
// not answer, rather than about what a peer sent.
func peerDown(msg []byte) bool {
	for _, m := range peerDownMarks {
		if bytes.Contains(msg, m) {
			return true
		}
	}
	return false
}
