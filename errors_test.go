package lockraft_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

// exportedVar is one exported package-level variable of a non-test file:
// the expression it is assigned (nil without one) and its doc comment (the
// comment above it, or above its var declaration when that declares it
// alone).
type exportedVar struct {
	value ast.Expr
	doc   string
}

// exportedVars returns, for the non-test files of dir, each exported
// package-level variable by name.
func exportedVars(t *testing.T, dir string) map[string]exportedVar {
	t.Helper()
	fs := token.NewFileSet()
	out := map[string]exportedVar{}
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, filepath.Join(dir, e.Name()), nil, parser.ParseComments|parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				doc := vs.Doc
				if doc == nil && len(g.Specs) == 1 {
					doc = g.Doc
				}
				for i, n := range vs.Names {
					if !n.IsExported() {
						continue
					}
					v := exportedVar{doc: doc.Text()}
					if i < len(vs.Values) {
						v.value = vs.Values[i]
					}
					out[n.Name] = v
				}
			}
		}
	}
	return out
}

// The sentinel errors are declared once, in internal/lockerr, and named
// once for users: every lockerr sentinel is a variable of package lockraft
// of the same name assigned from it (so the two are one value and errors.Is
// cannot tell them apart), every exported error variable of package
// lockraft is one of them, and package node, which returns them, exports no
// copy. The planted check: a root error assigned from another sentinel, or
// declared on its own, is caught (checkErrorNames on a doctored map).
func TestErrorsDeclaredOnce(t *testing.T) {
	sentinels := values(exportedVars(t, filepath.Join("internal", "lockerr")))
	require.NotEmpty(t, sentinels)
	root := values(exportedVars(t, "."))
	require.Empty(t, checkErrorNames(sentinels, root))

	for name := range exportedVars(t, "node") {
		_, dup := sentinels[name]
		require.False(t, dup, "package node exports its own %s; use lockerr.%s", name, name)
	}

	doctored := map[string]ast.Expr{}
	for k, v := range root {
		doctored[k] = v
	}
	doctored["ErrLocked"] = &ast.SelectorExpr{X: ast.NewIdent("lockerr"), Sel: ast.NewIdent("ErrNotHeld")}
	doctored["ErrOwnCopy"] = &ast.CallExpr{Fun: &ast.SelectorExpr{X: ast.NewIdent("errors"), Sel: ast.NewIdent("New")}}
	require.Len(t, checkErrorNames(sentinels, doctored), 2)
}

// checkErrorNames lists the disagreements between lockerr's sentinels and
// the root's exported variables whose names start with Err.
func checkErrorNames(sentinels, root map[string]ast.Expr) []string {
	var bad []string
	for name := range sentinels {
		if _, ok := root[name]; !ok {
			bad = append(bad, name+": no lockraft."+name)
		}
	}
	for name, x := range root {
		if !strings.HasPrefix(name, "Err") {
			continue
		}
		sel, ok := x.(*ast.SelectorExpr)
		if _, known := sentinels[name]; !known || !ok || sel.Sel.Name != name {
			bad = append(bad, name+": not assigned from lockerr."+name)
			continue
		}
		if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "lockerr" {
			bad = append(bad, name+": not assigned from lockerr."+name)
		}
	}
	slices.Sort(bad)
	return bad
}

// values keeps the assigned expression of each variable.
func values(vars map[string]exportedVar) map[string]ast.Expr {
	out := map[string]ast.Expr{}
	for name, v := range vars {
		out[name] = v.value
	}
	return out
}

// errorDocs returns, for the non-test files of dir, each exported
// package-level variable whose name starts with Err and its doc comment.
func errorDocs(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, v := range exportedVars(t, dir) {
		if strings.HasPrefix(name, "Err") {
			out[name] = v.doc
		}
	}
	return out
}

// rootErrors are the values of package lockraft's exported errors, by
// name; TestErrorDocs checks that it lists every one.
var rootErrors = map[string]error{
	"ErrLocked": lockraft.ErrLocked, "ErrNotHeld": lockraft.ErrNotHeld, "ErrClosed": lockraft.ErrClosed,
	"ErrInvalidName": lockraft.ErrInvalidName, "ErrInvalidOwner": lockraft.ErrInvalidOwner,
	"ErrInvalidConfig": lockraft.ErrInvalidConfig, "ErrInvalidLease": lockraft.ErrInvalidLease,
	"ErrTooManyHolds": lockraft.ErrTooManyHolds, "ErrAlreadyWaiting": lockraft.ErrAlreadyWaiting,
	"ErrReleased": lockraft.ErrReleased, "ErrLeaseExpired": lockraft.ErrLeaseExpired,
	"ErrSessionExpired": lockraft.ErrSessionExpired, "ErrUnavailable": lockraft.ErrUnavailable,
	"ErrStorage": lockraft.ErrStorage, "ErrRemoved": lockraft.ErrRemoved, "ErrDataDir": lockraft.ErrDataDir,
	"ErrNewerVersion": lockraft.ErrNewerVersion, "ErrInternal": lockraft.ErrInternal,
	"ErrWrongKind": lockraft.ErrWrongKind, "ErrUpgrade": lockraft.ErrUpgrade,
	"ErrHoldConflict": lockraft.ErrHoldConflict, "ErrBadPermits": lockraft.ErrBadPermits,
	"ErrPermitsMismatch": lockraft.ErrPermitsMismatch, "ErrTooManyNames": lockraft.ErrTooManyNames,
	"ErrDuplicateName": lockraft.ErrDuplicateName, "ErrInvalidValue": lockraft.ErrInvalidValue,
	"ErrOlderMembers": lockraft.ErrOlderMembers, "ErrObserveLagged": lockraft.ErrObserveLagged,
	"ErrQuotaExceeded": lockraft.ErrQuotaExceeded, "ErrNotLeader": lockraft.ErrNotLeader,
	"ErrNotMember": lockraft.ErrNotMember, "ErrRefused": lockraft.ErrRefused,
}

// TestErrorDocs walks every exported error of package lockraft against its
// godoc: each has a comment that says its outcome ("Outcome:") and whether
// it is retryable ("Retryable: yes" or "Retryable: no", once), and that
// answer is IsRetryable's for the error. So retryability is decided in
// IsRetryable and stated, the same, beside each error. The planted check:
// a comment that claims the wrong answer, or says nothing, is caught.
func TestErrorDocs(t *testing.T) {
	docs := errorDocs(t, ".")
	names := slices.Sorted(maps.Keys(docs))
	require.Equal(t, slices.Sorted(maps.Keys(rootErrors)), names, "rootErrors lists every exported error")
	require.Empty(t, checkErrorDocs(docs))

	doctored := maps.Clone(docs)
	doctored["ErrClosed"] = strings.Replace(doctored["ErrClosed"], "Retryable: no", "Retryable: yes", 1)
	doctored["ErrUnavailable"] = "ErrUnavailable: no leader."
	require.Len(t, checkErrorDocs(doctored), 2, "%v", checkErrorDocs(doctored))
}

// checkErrorDocs lists the errors whose doc comment does not state their
// outcome and their retryability, or states a retryability IsRetryable
// disagrees with.
func checkErrorDocs(docs map[string]string) []string {
	var bad []string
	for name, doc := range docs {
		text := strings.Join(strings.Fields(doc), " ") // comments wrap anywhere
		yes, no := strings.Count(text, "Retryable: yes"), strings.Count(text, "Retryable: no")
		switch {
		case doc == "":
			bad = append(bad, name+": no doc comment")
		case !strings.Contains(text, "Outcome:"):
			bad = append(bad, name+": does not say its outcome (Outcome:)")
		case yes+no != 1:
			bad = append(bad, name+`: says "Retryable: yes" or "Retryable: no" other than once`)
		case (yes == 1) != lockraft.IsRetryable(rootErrors[name]):
			bad = append(bad, fmt.Sprintf("%s: doc says retryable=%v, IsRetryable says %v", name, yes == 1,
				lockraft.IsRetryable(rootErrors[name])))
		}
	}
	slices.Sort(bad)
	return bad
}
