package component_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/component"
)

// writeCalls are the bus calls that write the bucket they are handed:
// a Writer, and the Conn's single writes.
var writeCalls = map[string]bool{"NewWriter": true, "Put": true, "PutRaw": true, "Delete": true, "Purge": true, "Create": true, "Update": true}

// daemonDirs maps each daemon to the tree of its code.
var daemonDirs = map[string]string{
	component.Sources: "sources", component.Admission: "admission", component.Runtime: "runtime",
	component.Prober: "prober", component.Status: "status", component.GC: "gc", component.Server: "server",
	component.Devices: "devices",
}

// TestDeclaredBucketsAreTheOnesUsed derives each daemon's bucket reads and
// writes from its code and holds them against the declaration, both ways:
// a grant the code never uses is as much a failure as a use without one
// (least privilege). Read from the code: every mention of a bucket's name
// (bus.BucketX, component.BucketX or its string) in the daemon's package
// tree, tests left out, is a read — a daemon reads back the buckets it
// writes too, to reconcile after a restart; a mention as an argument of
// NewWriter, Put, PutRaw, Delete, Purge, Create or Update is also a write.
// Hiding a bucket's name in a variable before such a call makes this test
// fail rather than pass: the write it cannot see is still declared.
func TestDeclaredBucketsAreTheOnesUsed(t *testing.T) {
	names := bucketConstants(t)
	for _, d := range component.Declared.Daemons() {
		if _, ok := daemonDirs[d]; !ok && d != component.Supervisor {
			t.Errorf("daemon %s has no code tree in this test: add it to daemonDirs", d)
		}
	}
	for name, dir := range daemonDirs {
		t.Run(name, func(t *testing.T) {
			reads, writes := bucketsUsed(t, filepath.Join("..", "..", "services", dir), names)
			c, ok := component.Declared.Get(name)
			if !ok {
				t.Fatalf("%s is not declared", name)
			}
			var declaredWrites []string
			for _, b := range c.Writes {
				declaredWrites = append(declaredWrites, b.Name)
			}
			compare(t, "reads", c.Reads, reads)
			compare(t, "writes", declaredWrites, writes)
		})
	}
}

func compare(t *testing.T, what string, declared, used []string) {
	t.Helper()
	for _, b := range declared {
		if !slices.Contains(used, b) {
			t.Errorf("declared %s %s, which its code never uses: remove the grant", what, b)
		}
	}
	for _, b := range used {
		if !slices.Contains(declared, b) {
			t.Errorf("its code %s %s without a grant: declare it", what, b)
		}
	}
}

// bucketConstants reads the bucket names from the declaration's source:
// the Bucket* constants of component.go, name → value.
func bucketConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "component.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Bucket") {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			v, _ := strconv.Unquote(lit.Value)
			out[vs.Names[0].Name] = v
		}
		return true
	})
	if len(out) < 10 {
		t.Fatalf("found %d bucket constants in component.go: %v", len(out), out)
	}
	return out
}

// bucketsUsed walks the non-test Go files under dir.
func bucketsUsed(t *testing.T, dir string, names map[string]string) (reads, writes []string) {
	t.Helper()
	values := map[string]bool{}
	for _, v := range names {
		values[v] = true
	}
	bucketOf := func(e ast.Expr) string {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok && (id.Name == "bus" || id.Name == "component") {
				return names[x.Sel.Name]
			}
		case *ast.BasicLit:
			if v, err := strconv.Unquote(x.Value); err == nil && x.Kind == token.STRING && values[v] {
				return v
			}
		}
		return ""
	}
	add := func(set *[]string, b string) {
		if b != "" && !slices.Contains(*set, b) {
			*set = append(*set, b)
		}
	}
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && writeCalls[calleeName(call.Fun)] {
				for _, a := range call.Args {
					add(&writes, bucketOf(a))
				}
			}
			if e, ok := n.(ast.Expr); ok {
				add(&reads, bucketOf(e))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no Go files under %s", dir)
	}
	slices.Sort(reads)
	slices.Sort(writes)
	return reads, writes
}

// calleeName is the name of the function or method called, generic
// instantiations included (bus.Put[T] is Put).
func calleeName(fun ast.Expr) string {
	switch f := fun.(type) {
	case *ast.IndexExpr:
		return calleeName(f.X)
	case *ast.IndexListExpr:
		return calleeName(f.X)
	case *ast.SelectorExpr:
		return f.Sel.Name
	case *ast.Ident:
		return f.Name
	}
	return ""
}
