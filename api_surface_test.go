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
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// modulePath is lockraft's module. No exported declaration of the root
// package may mention another package of it (node, membership, lockfsm,
// internal/..., ...): a user must never need them. The exception is a
// type alias the root declares to a type of one of the module's internal
// packages (lockraft.LockView = views.LockView), or one of engineAliases
// (lockraft.GossipTiming = membership.Timing): the root then names that
// type itself, and its fields and methods are checked as the root's own.
const modulePath = "github.com/lockraft/lockraft"

func ourPackage(p *types.Package) bool {
	return p.Path() != modulePath && strings.HasPrefix(p.Path()+"/", modulePath+"/")
}

func internalPackage(p *types.Package) bool {
	return strings.HasPrefix(p.Path()+"/", modulePath+"/internal/")
}

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

// surface walks the exported API of package root and lists where it
// mentions another package of the module. aliased are the types of the
// module's internal packages the root names by an exported alias: a mention
// of one of those is the root's own type, walked like one.
type surface struct {
	root    *types.Package
	aliased map[*types.TypeName]string
	seen    map[types.Type]bool
	found   []string
}

func newSurface(root *types.Package, aliased map[*types.TypeName]string) *surface {
	return &surface{root: root, aliased: aliased, seen: map[types.Type]bool{}}
}

// engineAliases are the root's aliases to types of an engine package that
// the root names on purpose: gossip's timing and voter policy, plain
// structs of durations and counts whose fields are documented once, in
// package membership. They are walked as the root's own types, so a field
// of theirs that mentioned another package of the module would be caught.
var engineAliases = map[string]string{
	"GossipTiming": modulePath + "/membership.Timing",
	"VoterPolicy":  modulePath + "/membership.Thresholds",
}

// rootAliases returns the exported aliases of root to types of the module's
// internal packages (target to the alias's name), and every other exported
// alias of root to a package of the module, which is not allowed.
func rootAliases(root *types.Package) (aliased map[*types.TypeName]string, bad []string) {
	aliased = map[*types.TypeName]string{}
	scope := root.Scope()
	for _, name := range scope.Names() {
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok || !tn.Exported() || !tn.IsAlias() {
			continue
		}
		named, ok := types.Unalias(tn.Type()).(*types.Named)
		if !ok || named.Obj().Pkg() == nil || !ourPackage(named.Obj().Pkg()) {
			continue
		}
		if !internalPackage(named.Obj().Pkg()) && engineAliases[name] != named.String() {
			bad = append(bad, fmt.Sprintf("%s: alias of %s, not of an internal package", name, named))
			continue
		}
		aliased[named.Obj()] = name
	}
	return aliased, bad
}

// mentions records where typ (reached by path) refers to another package of
// the module. It walks into the root's own named types and the aliased
// ones (their exported fields and methods) but not into other packages'
// (time.Time, prometheus.Registerer).
func (s *surface) mentions(path string, typ types.Type) {
	if typ == nil || s.seen[typ] {
		return
	}
	s.seen[typ] = true
	switch t := typ.(type) {
	case *types.Alias:
		if p := t.Obj().Pkg(); p != nil && p != s.root && ourPackage(p) {
			s.found = append(s.found, fmt.Sprintf("%s: alias %s", path, t))
			return
		}
		s.mentions(path, types.Unalias(t))
	case *types.Named:
		if p := t.Obj().Pkg(); p != nil && p != s.root {
			if !ourPackage(p) {
				return
			}
			name, ok := s.aliased[t.Obj()]
			if !ok {
				s.found = append(s.found, fmt.Sprintf("%s: %s", path, t))
				return
			}
			path = name
		}
		for i := range t.NumMethods() {
			if m := t.Method(i); m.Exported() {
				s.mentions(path+"."+m.Name(), m.Type())
			}
		}
		s.mentions(path, t.Underlying())
	case *types.Struct:
		for i := range t.NumFields() {
			if f := t.Field(i); f.Exported() {
				s.mentions(path+"."+f.Name(), f.Type())
			}
		}
	case *types.Signature:
		for i := range t.Params().Len() {
			s.mentions(path+"(param)", t.Params().At(i).Type())
		}
		for i := range t.Results().Len() {
			s.mentions(path+"(result)", t.Results().At(i).Type())
		}
	case *types.Pointer:
		s.mentions(path, t.Elem())
	case *types.Slice:
		s.mentions(path, t.Elem())
	case *types.Array:
		s.mentions(path, t.Elem())
	case *types.Map:
		s.mentions(path, t.Key())
		s.mentions(path, t.Elem())
	case *types.Chan:
		s.mentions(path, t.Elem())
	case *types.Interface:
		for i := range t.NumMethods() {
			s.mentions(path+"."+t.Method(i).Name(), t.Method(i).Type())
		}
	}
}

// No exported declaration of package lockraft (function, method, type,
// field, alias, variable or constant type) mentions another package of the
// module: a user configures and reads everything through the root package
// alone. The exception is exactly the root's exported aliases to types of
// internal packages (the inspection views and MemberID, declared once in
// internal/views) and the engineAliases (GossipTiming, VoterPolicy): those
// types are walked as the root's own, so a field of theirs that mentioned
// node would be caught. The planted checks: the same
// walk over package node's own GossipConfig finds membership, and over
// node's InspectLock finds the views when no alias names them
// (TestAPISurfaceCheckCatches).
func TestAPISurfaceHidesInternalPackages(t *testing.T) {
	pkg := loadRoot(t)
	aliased, bad := rootAliases(pkg)
	require.Empty(t, bad, "exported aliases of lockraft to non-internal packages of the module (other than engineAliases)")
	var names []string
	for _, n := range aliased {
		names = append(names, n)
	}
	slices.Sort(names)
	require.Equal(t, []string{"GossipTiming", "HolderView", "LockView", "LocksPage", "MemberID", "MemberView", "MembersView",
		"VoterPolicy", "WaiterView"}, names, "the root's aliases to the module's types: each must be a type the root means to name")
	s := newSurface(pkg, aliased)
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		if tn, ok := obj.(*types.TypeName); ok && tn.IsAlias() {
			s.mentions(name, tn.Type())
			continue
		}
		s.mentions(name, obj.Type())
	}
	require.Empty(t, s.found, "exported API of lockraft mentions a package of the module")
	require.NotNil(t, scope.Lookup("WithGossip"), "the walk saw the API")

	// The walk goes into the aliased types: without the alias naming
	// HolderView, LockView.Holder is caught.
	fewer := map[*types.TypeName]string{}
	for obj, n := range aliased {
		if n != "HolderView" {
			fewer[obj] = n
		}
	}
	s = newSurface(pkg, fewer)
	s.mentions("LockView", scope.Lookup("LockView").Type())
	require.Contains(t, s.found, "LockView.Holder: github.com/lockraft/lockraft/internal/views.HolderView")
}

func TestAPISurfaceCheckCatches(t *testing.T) {
	pkg := loadRoot(t)
	var nodePkg *types.Package
	for _, p := range pkg.Imports() {
		if p.Path() == modulePath+"/node" {
			nodePkg = p
		}
	}
	require.NotNil(t, nodePkg)

	s := newSurface(nodePkg, nil)
	s.mentions("GossipConfig", nodePkg.Scope().Lookup("GossipConfig").Type())
	require.NotEmpty(t, s.found, "a struct with a membership.Timing field is caught")
	t.Logf("caught: %v", s.found)

	nodeType := nodePkg.Scope().Lookup("Node").Type().(*types.Named)
	var inspect types.Type
	for i := range nodeType.NumMethods() {
		if m := nodeType.Method(i); m.Name() == "InspectLock" {
			inspect = m.Type()
		}
	}
	require.NotNil(t, inspect)
	s = newSurface(nodePkg, nil)
	s.mentions("Node.InspectLock", inspect)
	require.NotEmpty(t, s.found, "a view without an alias naming it is caught")
	t.Logf("caught: %v", s.found)
}
