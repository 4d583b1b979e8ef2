package lease

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestPure: the engine's code starts no goroutines, reads no clock and
// draws no random numbers (time comes in as arguments, so a seeded
// simulation replays it exactly).
func TestPure(t *testing.T) {
	banned := map[string]bool{"time.Now": true, "time.Since": true, "time.Until": true, "time.After": true,
		"time.AfterFunc": true, "time.NewTimer": true, "time.NewTicker": true, "time.Tick": true, "time.Sleep": true}
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, fi := range files {
		name := fi.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "math/rand") || p == "crypto/rand" {
				t.Errorf("%s imports %s", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: a go statement", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && banned[x.Name+"."+n.Sel.Name] {
					t.Errorf("%s: %s.%s", fset.Position(n.Pos()), x.Name, n.Sel.Name)
				}
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("checked only %d files", checked)
	}
}
