package component_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/tools/units"
)

// edit changes one component of a copy of the declaration: the one edit a
// developer makes.
func edit(name string, f func(c *component.Component)) component.Set {
	s := component.Declared.Clone()
	for i := range s {
		if s[i].Name == name {
			f(&s[i])
		}
	}
	return s
}

func unit(t *testing.T, s component.Set, name string) string {
	t.Helper()
	files, err := units.SystemdUnits(s, units.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Name == "nodelet-"+name+".service" {
			return string(f.Data)
		}
	}
	t.Fatalf("no unit for %s", name)
	return ""
}

// composeService is the block of one service in docker-compose.yml.
func composeService(t *testing.T, s component.Set, name string) string {
	t.Helper()
	b, err := units.Compose(s, units.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		top := strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "   ")
		switch {
		case top && l == "  "+name+":":
			in = true
		case top || !strings.HasPrefix(l, " "):
			in = false
		}
		if in {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no compose service %s", name)
	}
	return strings.Join(out, "\n") + "\n"
}

func publishes(t *testing.T, m bus.Matrix, c, subject string) bool {
	t.Helper()
	p, err := m.Permissions(c)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(p.Publish.Allow, subject)
}

// TestOneEditDependency: making the prober require status is one edit of
// the declaration; the start order, the prober's unit and its compose
// service follow.
func TestOneEditDependency(t *testing.T) {
	s := edit(component.Prober, func(c *component.Component) { c.Requires = append(c.Requires, component.Status) })

	order := component.Set(s.MustOrder()).Names()
	if slices.Index(order, component.Prober) < slices.Index(order, component.Status) {
		t.Errorf("start order %v: prober before status", order)
	}
	old := component.Set(component.StartOrder()).Names()
	if slices.Index(old, component.Prober) > slices.Index(old, component.Status) {
		t.Fatalf("the declared order %v already starts the prober after status: the test proves nothing", old)
	}

	const dep = "nodelet-status.service"
	if strings.Contains(unit(t, component.Declared, component.Prober), dep) {
		t.Fatalf("the declared prober unit already names %s", dep)
	}
	u := unit(t, s, component.Prober)
	for _, key := range []string{"Wants=", "After="} {
		if !strings.Contains(u, key+"nodelet-bus.service nodelet-runtime.service "+dep+"\n") {
			t.Errorf("prober unit has no %s…%s:\n%s", key, dep, u)
		}
	}

	if strings.Contains(composeService(t, component.Declared, component.Prober), "status:") {
		t.Fatal("the declared prober service already depends on status")
	}
	if svc := composeService(t, s, component.Prober); !strings.Contains(svc, "      status:\n        condition: service_healthy\n") {
		t.Errorf("prober's compose service does not wait for status:\n%s", svc)
	}
}

// TestOneEditBucket: letting the prober read the statuses, and moving the
// images bucket from gc to status, are each one edit of the declaration;
// the bus's permissions and accounts follow.
func TestOneEditBucket(t *testing.T) {
	info := "$JS.API.STREAM.INFO.KV_" + component.BucketStatus
	if publishes(t, bus.MatrixOf(component.Declared), component.Prober, info) {
		t.Fatal("the declared prober already reads the statuses")
	}
	s := edit(component.Prober, func(c *component.Component) { c.Reads = append(c.Reads, component.BucketStatus) })
	m := bus.MatrixOf(s)
	if !publishes(t, m, component.Prober, info) {
		t.Errorf("prober may not call %s after the edit", info)
	}
	if !slices.Contains(m.ReadableStreams(component.Prober), "KV_"+component.BucketStatus) {
		t.Errorf("prober's readable streams %v lack the statuses", m.ReadableStreams(component.Prober))
	}
	if a := m.AccountsConfig(); a == bus.MatrixOf(component.Declared).AccountsConfig() {
		t.Error("the accounts did not change with the prober's reads")
	}

	put := bus.KVSubject(component.BucketImages, ">")
	s = component.Declared.Clone()
	for i := range s {
		switch s[i].Name {
		case component.GC:
			s[i].Writes = slices.DeleteFunc(s[i].Writes, func(b component.Bucket) bool { return b.Name == component.BucketImages })
		case component.Status:
			s[i].Writes = append(s[i].Writes, component.Bucket{Name: component.BucketImages, History: 1})
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	m = bus.MatrixOf(s)
	if !publishes(t, bus.MatrixOf(component.Declared), component.GC, put) || publishes(t, m, component.GC, put) {
		t.Errorf("gc's right to put images did not go with the bucket")
	}
	if publishes(t, bus.MatrixOf(component.Declared), component.Status, put) || !publishes(t, m, component.Status, put) {
		t.Errorf("status's right to put images did not come with the bucket")
	}
}
