package status

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/testenv"
)

// Only nodelet-status records events to the API (issue 18): every other
// daemon emits its events on the bus, and status's event recorder posts
// them. This reads the shipped code of every daemon and fails on a client
// of the events API (CoreV1().Events, EventsV1, client-go's recorders)
// anywhere but here.
func TestOnlyStatusRecordsEventsToTheAPI(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	recorders := map[string]bool{
		"k8s.io/client-go/tools/record":                    true,
		"k8s.io/client-go/tools/events":                    true,
		"k8s.io/client-go/kubernetes/typed/events/v1":      true,
		"k8s.io/client-go/kubernetes/typed/events/v1beta1": true,
	}
	dirs := []string{filepath.Join(root, "services"), filepath.Join(root, "internal")}
	var checked, ownUses int
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if d.IsDir() {
				// Test-only trees and operator tools do not run on a node.
				if rel == filepath.Join("internal", "e2e") || rel == filepath.Join("internal", "testenv") || rel == filepath.Join("internal", "tools") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			checked++
			status := strings.HasPrefix(rel, filepath.Join("services", "status")+string(filepath.Separator))
			for _, imp := range f.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); recorders[p] && !status {
					t.Errorf("%s imports %s: events go on the bus; nodelet-status posts them", rel, p)
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Events" && sel.Sel.Name != "EventsV1") {
					return true
				}
				call, ok := sel.X.(*ast.CallExpr)
				if !ok {
					return true
				}
				if inner, ok := call.Fun.(*ast.SelectorExpr); !ok || (inner.Sel.Name != "CoreV1" && sel.Sel.Name != "EventsV1") {
					return true
				}
				if status {
					ownUses++
				} else {
					t.Errorf("%s uses the events API (%s): events go on the bus; nodelet-status posts them", rel, sel.Sel.Name)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 50 || ownUses == 0 {
		t.Fatalf("read %d files, found status's own events client %d times: the scan does not see the code", checked, ownUses)
	}
}
