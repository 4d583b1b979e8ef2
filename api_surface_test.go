package lockraft_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// internalPkgs are the packages a user of lockraft must never need: no
// exported declaration of the root package may mention them.
var internalPkgs = []string{"github.com/lockraft/lockraft/node", "github.com/lockraft/lockraft/membership"}

// loadRoot type-checks package lockraft from the build cache's export data
// (go list -export), as the compiler sees it.
func loadRoot(t *testing.T) *types.Package {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-f", "{{.ImportPath}} {{.Export}}", "-deps", ".").Output()
	require.NoError(t, err)
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), " "); ok && file != "" {
			exports[path] = file
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	pkg, err := imp.Import("github.com/lockraft/lockraft")
	require.NoError(t, err)
	return pkg
}

// mentions lists where typ (reached by path) refers to an internal package.
// It walks into lockraft's own named types (their fields and methods) but
// not into other packages' (time.Time, prometheus.Registerer).
func mentions(root *types.Package, path string, typ types.Type, seen map[types.Type]bool, found *[]string) {
	if typ == nil || seen[typ] {
		return
	}
	seen[typ] = true
	switch t := typ.(type) {
	case *types.Alias:
		if p := t.Obj().Pkg(); p != nil && p != root {
			for _, bad := range internalPkgs {
				if p.Path() == bad {
					*found = append(*found, fmt.Sprintf("%s: alias of %s", path, t))
				}
			}
		}
		mentions(root, path, types.Unalias(t), seen, found)
	case *types.Named:
		if p := t.Obj().Pkg(); p != nil && p != root {
			for _, bad := range internalPkgs {
				if p.Path() == bad {
					*found = append(*found, fmt.Sprintf("%s: %s", path, t))
				}
			}
			return
		}
		for i := range t.NumMethods() {
			if m := t.Method(i); m.Exported() {
				mentions(root, path+"."+m.Name(), m.Type(), seen, found)
			}
		}
		mentions(root, path, t.Underlying(), seen, found)
	case *types.Struct:
		for i := range t.NumFields() {
			if f := t.Field(i); f.Exported() {
				mentions(root, path+"."+f.Name(), f.Type(), seen, found)
			}
		}
	case *types.Signature:
		for i := range t.Params().Len() {
			mentions(root, path+"(param)", t.Params().At(i).Type(), seen, found)
		}
		for i := range t.Results().Len() {
			mentions(root, path+"(result)", t.Results().At(i).Type(), seen, found)
		}
	case *types.Pointer:
		mentions(root, path, t.Elem(), seen, found)
	case *types.Slice:
		mentions(root, path, t.Elem(), seen, found)
	case *types.Array:
		mentions(root, path, t.Elem(), seen, found)
	case *types.Map:
		mentions(root, path, t.Key(), seen, found)
		mentions(root, path, t.Elem(), seen, found)
	case *types.Chan:
		mentions(root, path, t.Elem(), seen, found)
	case *types.Interface:
		for i := range t.NumMethods() {
			mentions(root, path+"."+t.Method(i).Name(), t.Method(i).Type(), seen, found)
		}
	}
}

// No exported declaration of package lockraft (function, method, type,
// field, alias, variable or constant type) mentions package node or
// membership: a user configures and reads everything through the root
// package alone. The planted check: the same walk over package node's own
// GossipConfig finds membership (TestAPISurfaceCheckCatches).
func TestAPISurfaceHidesInternalPackages(t *testing.T) {
	pkg := loadRoot(t)
	var found []string
	seen := map[types.Type]bool{}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		if tn, ok := obj.(*types.TypeName); ok && tn.IsAlias() {
			mentions(pkg, name, tn.Type(), seen, &found)
			continue
		}
		mentions(pkg, name, obj.Type(), seen, &found)
	}
	require.Empty(t, found, "exported API of lockraft mentions an internal package")
	require.NotNil(t, scope.Lookup("WithGossip"), "the walk saw the API")
}

func TestAPISurfaceCheckCatches(t *testing.T) {
	pkg := loadRoot(t)
	var nodePkg *types.Package
	for _, p := range pkg.Imports() {
		if p.Path() == "github.com/lockraft/lockraft/node" {
			nodePkg = p
		}
	}
	require.NotNil(t, nodePkg)
	var found []string
	obj := nodePkg.Scope().Lookup("GossipConfig")
	mentions(nodePkg, "GossipConfig", obj.Type(), map[types.Type]bool{}, &found)
	require.NotEmpty(t, found, "a struct with a membership.Timing field is caught")
	t.Logf("caught: %v", found)
}
