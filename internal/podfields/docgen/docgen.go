// Package docgen renders the field ledger as docs/pod-fields.md and finds
// the tests it names in the repository. Only the generator and the
// ledger's tests use it; no daemon links it.
package docgen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nodelet/nodelet/internal/podfields"
)

// Tests maps each test function of the repository at root to the files
// that define it (relative, with slashes), skipping the tools module under
// scripts/.
func Tests(root string) (map[string][]string, error) {
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "scripts" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") {
				out[fd.Name.Name] = append(out[fd.Name.Name], filepath.ToSlash(rel))
			}
		}
		return nil
	})
	return out, err
}

// Counts is how many fields the ledger has of each class.
func Counts() map[podfields.Class]int {
	out := map[podfields.Class]int{}
	for _, e := range podfields.Table() {
		out[e.Class]++
	}
	return out
}

// Markdown is docs/pod-fields.md: the ledger, by class of the fields'
// types, each honoured field with its tests (linked to the files tests
// names them in), each refused one with the reason and message its pod
// gets.
func Markdown(tests map[string][]string) string {
	var b strings.Builder
	c := Counts()
	fmt.Fprintf(&b, `# The Pod API on a nodelet node

Generated from the field ledger (`+"`internal/podfields`"+`; `+"`go generate ./internal/podfields/`"+`
rewrites this file, and `+"`TestPodFieldsDoc`"+` fails while it is stale). Every field of
v1.PodSpec, v1.Container, v1.EphemeralContainer, v1.Volume and the structs under them, in the
k8s.io/api version nodelet is built with, is one of:

- **honoured**: the node acts on it as the kubelet does; the tests named show it.
- **refused**: nodelet-admission refuses a pod that sets it: the pod fails with reason
  `+"`%s`"+` and the message shown (`+"`<path>`"+` is where the pod sets it, e.g.
  `+"`spec.volumes[0].nfs`"+`). Nothing is started for it.
- **not the node's**: the kubelet does not act on it either; the scheduler, kube-apiserver
  or a controller does (named).

`+"`TestLedgerCoversEveryField`"+` walks the types by reflection and fails for a field this
table does not classify, so an upgrade of k8s.io/api fails until each new field is
classified; `+"`TestLedgerTestsExist`"+` checks that every test named exists and speaks of its
field; services/admission's `+"`TestLedgerRefusals`"+` that admission refuses each refused field
with the reason and message shown. A struct's fields are listed once, under its type (a
Container's fields serve init, app and ephemeral containers alike); the fields of a refused
or not-the-node's field are not listed.

%d fields: %d honoured, %d refused, %d not the node's.
`, podfields.Reason, len(podfields.Table()), c[podfields.Honoured], c[podfields.Refused], c[podfields.NotNode])

	var types []string
	byType := map[string][]podfields.Entry{}
	for _, e := range podfields.Table() {
		t, _, _ := strings.Cut(e.Field, ".")
		if _, ok := byType[t]; !ok {
			types = append(types, t)
		}
		byType[t] = append(byType[t], e)
	}
	for _, t := range types {
		fmt.Fprintf(&b, "\n## %s\n\n| field | | how, why, who | tests or message |\n| --- | --- | --- | --- |\n", t)
		for _, e := range byType[t] {
			_, field, _ := strings.Cut(e.Field, ".")
			var last string
			switch e.Class {
			case podfields.Honoured:
				last = strings.Join(links(tests, e.Tests), ", ")
			case podfields.Refused:
				last = "`" + podfields.RefusalMessage("<path>", e) + "`"
				if e.Unless != "" {
					last = fmt.Sprintf("without the runtime's %s: %s; with it honoured: %s", e.Unless, last, strings.Join(links(tests, e.Tests), ", "))
				}
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", field, e.Class, cell(e.Note), cell(last))
		}
	}
	return b.String()
}

// links are the tests named, each linked to its file.
func links(tests map[string][]string, names []string) []string {
	var out []string
	for _, name := range names {
		files := slices.Clone(tests[name])
		slices.Sort(files)
		if len(files) == 0 {
			out = append(out, "`"+name+"` (missing)")
			continue
		}
		out = append(out, fmt.Sprintf("[`%s`](../%s)", name, files[0]))
	}
	return out
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Write renders the ledger into path.
func Write(root, path string) error {
	tests, err := Tests(root)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(Markdown(tests)), 0o644)
}
