// Command lockraftctl looks at a running lockraft cluster through the admin
// handler a service mounts (lockraft.Node.AdminHandler): who holds a lock,
// who waits and since when, which members there are and how far behind, and,
// where the service enabled operator actions, hands leadership over or
// removes a member.
//
//	lockraftctl [flags] status
//	lockraftctl [flags] members
//	lockraftctl [flags] locks [PREFIX]
//	lockraftctl [flags] lock NAME
//	lockraftctl [flags] leader transfer [ID]
//	lockraftctl [flags] member remove ID
//
// Flags (before or after the command): -endpoint URL (default
// $LOCKRAFT_ENDPOINT, else http://127.0.0.1:8080; include the path the
// service mounts the handler under), -o table|json, -timeout (default 5s;
// the handler is asked to answer within it, at most 60s), -stale (read the
// answering node's own view: no ReadIndex round, no leader needed; when a
// read fails for want of a leader the error says so), -limit
// (locks: at most this many names, default 100). Against a handler that
// serves only operators (lockraft.WithOperatorAuth), over https: -cacert
// (the server's CA), -cert and -key (an operator's client certificate, from
// lockraft-certs operator), or -token-file (a bearer token; also
// $LOCKRAFT_TOKEN). A token is never sent over plain http off loopback.
//
// Member ids are printed and taken in hex, 16 digits (leading zeros and
// 0x optional when given), as the admin handler, metrics, logs and
// certificates show them; a lock's default owner, node-<id>/call-<n>,
// names its member the same way.
//
// Names, owners and every other string the endpoint answers are printed
// escaped when they hold control or format characters ("\x1b[31m"), so
// that they cannot act on the terminal.
//
// Exit codes: 0 done; 1 the endpoint answered with an error (the message is
// printed; e.g. not the leader, refused, no such member); 2 bad usage; 3 the
// endpoint could not be reached (connection refused, DNS, timeout) or did not
// answer like a lockraft admin handler.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// Exit codes.
const (
	exitOK          = 0
	exitServerError = 1
	exitUsage       = 2
	exitUnreachable = 3
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type cli struct {
	http     *http.Client
	token    string // bearer token, "" for none
	endpoint string
	output   string
	timeout  time.Duration
	stale    bool
	limit    int
	out      io.Writer
}

const usage = `usage: lockraftctl [flags] COMMAND
commands:
  status                 this node: role, leader, readiness, raft indexes, lock table counts
  members                every member: gossip name, role, health, replication lag
  locks [PREFIX]         names held or waited for (under PREFIX), with holders and queue lengths
  lock NAME              one name: its holder and its waiters in queue order
  leader transfer [ID]   hand leadership to voter ID (default: the most caught-up one)
  member remove ID       remove a voter or learner (any member's endpoint; it asks the leader)
IDs are in hex, 16 digits (leading zeros and 0x optional), as members shows them.
flags:
`

// run is main without the process: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	c := &cli{out: stdout}
	fs := flag.NewFlagSet("lockraftctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := os.Getenv("LOCKRAFT_ENDPOINT")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	fs.StringVar(&c.endpoint, "endpoint", def, "admin handler URL (also $LOCKRAFT_ENDPOINT)")
	fs.StringVar(&c.output, "o", "table", "output: table or json")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "how long the endpoint may take to answer (at most 60s on its side)")
	fs.BoolVar(&c.stale, "stale", false, "read the answering node's own view, as applied (no ReadIndex round, no leader needed)")
	fs.IntVar(&c.limit, "limit", 100, "locks: at most this many names")
	var cr credentials
	fs.StringVar(&cr.caFile, "cacert", "", "https: the CA the server's certificate chains to (PEM; default: the system's)")
	fs.StringVar(&cr.certFile, "cert", "", "https: an operator's client certificate (PEM; lockraft-certs operator)")
	fs.StringVar(&cr.keyFile, "key", "", "https: its private key (PEM)")
	fs.StringVar(&cr.tokenFile, "token-file", "", "a file holding an operator's bearer token (also $LOCKRAFT_TOKEN)")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
		fmt.Fprintln(stderr, "exit codes: 0 ok, 1 the endpoint answered with an error, 2 usage, 3 endpoint unreachable")
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if c.output != "table" && c.output != "json" {
		fmt.Fprintf(stderr, "lockraftctl: -o %q: want table or json\n", c.output)
		return exitUsage
	}
	if c.limit < 1 {
		fmt.Fprintf(stderr, "lockraftctl: -limit %d: want at least 1\n", c.limit)
		return exitUsage
	}
	c.endpoint = strings.TrimRight(c.endpoint, "/")
	if err := c.connect(cr); err != nil {
		fmt.Fprintf(stderr, "lockraftctl: %v\n", err)
		return exitUsage
	}
	if len(pos) == 0 {
		fs.Usage()
		return exitUsage
	}
	var cmdErr error
	bad := func(msg string) int {
		fmt.Fprintf(stderr, "lockraftctl: %s\n", msg)
		fs.Usage()
		return exitUsage
	}
	switch cmd, rest := pos[0], pos[1:]; {
	case cmd == "status" && len(rest) == 0:
		cmdErr = c.status()
	case cmd == "members" && len(rest) == 0:
		cmdErr = c.members()
	case cmd == "locks" && len(rest) <= 1:
		prefix := ""
		if len(rest) == 1 {
			prefix = rest[0]
		}
		cmdErr = c.locks(prefix)
	case cmd == "lock" && len(rest) == 1:
		cmdErr = c.lock(rest[0])
	case cmd == "leader" && len(rest) >= 1 && rest[0] == "transfer" && len(rest) <= 2:
		to := ""
		if len(rest) == 2 {
			to = rest[1]
		}
		cmdErr = c.transfer(to)
	case cmd == "member" && len(rest) == 2 && rest[0] == "remove":
		cmdErr = c.remove(rest[1])
	default:
		return bad(fmt.Sprintf("unknown command or wrong arguments: %s", strings.Join(pos, " ")))
	}
	if cmdErr == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "lockraftctl: %v\n", cmdErr)
	if hint := staleHint(pos[0], c.stale, cmdErr); hint != "" {
		fmt.Fprintf(stderr, "lockraftctl: %s\n", hint)
	}
	var ue *unreachableError
	if errors.As(cmdErr, &ue) {
		return exitUnreachable
	}
	return exitServerError
}

// staleHint is what to tell a user whose command found no leader to answer
// it (HTTP 503, "unavailable": a majority of voters down or cut off): for a
// read, that -stale gives the member's own view; "" otherwise. The operator
// actions have no such fallback: they need the leader.
func staleHint(cmd string, stale bool, err error) string {
	se, ok := err.(*serverError)
	if !ok || se.status != http.StatusServiceUnavailable || se.code != "unavailable" {
		return ""
	}
	switch cmd {
	case "members", "locks", "lock":
		if stale {
			return ""
		}
		return "no leader answered (a majority of the voters may be down or cut off); -stale shows this member's own view, which may be out of date"
	case "leader", "member":
		return "no leader answered (a majority of the voters may be down or cut off); operator actions need one"
	}
	return ""
}

// parseInterleaved parses flags anywhere among the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
