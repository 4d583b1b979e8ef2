package lockraft_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// exportedVars returns, for the non-test files of dir, each exported
// package-level variable with the expression it is assigned (nil without
// one).
func exportedVars(t *testing.T, dir string) map[string]ast.Expr {
	t.Helper()
	fs := token.NewFileSet()
	out := map[string]ast.Expr{}
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !n.IsExported() {
						continue
					}
					var x ast.Expr
					if i < len(vs.Values) {
						x = vs.Values[i]
					}
					out[n.Name] = x
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
	sentinels := exportedVars(t, filepath.Join("internal", "lockerr"))
	require.NotEmpty(t, sentinels)
	root := exportedVars(t, ".")
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
