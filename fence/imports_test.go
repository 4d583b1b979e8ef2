package fence

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreImportsNoDriver: lockraft's own packages (everything an embedding
// service compiles) depend on no database driver and not on this package;
// only fence's tests, examples/cluster and internal/sqlserver do.
func TestCoreImportsNoDriver(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	core := []string{"github.com/lockraft/lockraft", "github.com/lockraft/lockraft/node", "github.com/lockraft/lockraft/transport",
		"github.com/lockraft/lockraft/raftlog", "github.com/lockraft/lockraft/membership", "github.com/lockraft/lockraft/lockfsm"}
	out, err := exec.Command(gobin, append([]string{"list", "-deps"}, core...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps gave %d packages: %s", len(deps), out)
	}
	for _, p := range deps {
		for _, bad := range []string{"modernc.org/sqlite", "github.com/jackc/pgx", "github.com/go-sql-driver/mysql",
			"github.com/lockraft/lockraft/fence", "github.com/lockraft/lockraft/internal/sqlserver"} {
			if strings.HasPrefix(p, bad) {
				t.Errorf("core package graph contains %s", p)
			}
		}
	}
	// This package itself: database/sql, gRPC and net/http, but no driver.
	out, err = exec.Command(gobin, "list", "-deps", "github.com/lockraft/lockraft/fence").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "modernc.org/") || strings.HasPrefix(p, "github.com/jackc/") || strings.HasPrefix(p, "github.com/go-sql-driver/") {
			t.Errorf("fence depends on driver package %s", p)
		}
	}
}
