package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// The parts of ginkgo v2's JSON report (types.Report) read here.
type ginkgoReport struct {
	PreRunStats struct {
		TotalSpecs, SpecsThatWillRun int
	}
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeText            string
		LeafNodeType            string
		State                   string
		RunTime                 time.Duration
		Failure                 struct {
			Message  string
			Location struct {
				FileName   string
				LineNumber int
			}
		}
	}
}

// summary counts the specs of one run.
type summary struct {
	Total, Selected, Passed, Failed, Skipped int
	Failures                                 []failure
}

type failure struct {
	Name, State, Message string
}

func readReport(path string) (*summary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseReport(b)
}

func parseReport(b []byte) (*summary, error) {
	var reports []ginkgoReport
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("not a ginkgo JSON report: %w", err)
	}
	s := &summary{}
	for _, r := range reports {
		s.Total += r.PreRunStats.TotalSpecs
		s.Selected += r.PreRunStats.SpecsThatWillRun
		for _, sr := range r.SpecReports {
			name := strings.TrimSpace(strings.Join(append(append([]string{}, sr.ContainerHierarchyTexts...), sr.LeafNodeText), " "))
			if sr.LeafNodeType != "It" {
				// A failed BeforeSuite fails every spec: report it by its node.
				if sr.State != "passed" && sr.State != "skipped" {
					s.Failures = append(s.Failures, failure{Name: strings.TrimSpace("[" + sr.LeafNodeType + "] " + name), State: sr.State, Message: firstLine(sr.Failure.Message)})
				}
				continue
			}
			switch sr.State {
			case "passed":
				s.Passed++
			case "skipped", "pending":
				if sr.Failure.Message != "" { // skipped at run time, not filtered out
					s.Skipped++
				}
			default: // failed, panicked, timedout, interrupted, aborted
				s.Failed++
				s.Failures = append(s.Failures, failure{Name: name, State: sr.State, Message: firstLine(sr.Failure.Message)})
			}
		}
	}
	sort.Slice(s.Failures, func(i, j int) bool { return s.Failures[i].Name < s.Failures[j].Name })
	return s, nil
}

// add counts another run of the same suite (a phase) in s.
func (s *summary) add(o *summary) {
	s.Total = max(s.Total, o.Total)
	s.Selected += o.Selected
	s.Passed += o.Passed
	s.Failed += o.Failed
	s.Skipped += o.Skipped
	s.Failures = append(s.Failures, o.Failures...)
	sort.Slice(s.Failures, func(i, j int) bool { return s.Failures[i].Name < s.Failures[j].Name })
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func (s *summary) print(w io.Writer, took time.Duration) {
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped at run time, of %d selected specs (%d in the suite) in %s\n",
		s.Passed, s.Failed, s.Skipped, s.Selected, s.Total, took.Round(time.Second))
	for _, f := range s.Failures {
		fmt.Fprintf(w, "FAIL [%s] %s\n     %s\n", f.State, f.Name, f.Message)
	}
}

// progress passes through the lines of ginkgo's verbose output that say a
// spec ended, so a long run shows where it is.
type progress struct {
	mu   sync.Mutex
	w    io.Writer
	buf  []byte
	done int
}

func newProgress(w io.Writer) *progress { return &progress{w: w} }

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(p.buf[:i]))
		p.buf = p.buf[i+1:]
		for _, mark := range []string{"[FAILED]", "[PANICKED]", "[TIMEDOUT]", "[INTERRUPTED]"} {
			if strings.HasPrefix(line, "• "+mark) || strings.HasPrefix(line, mark+" [") {
				fmt.Fprintf(p.w, "%s\n", line)
			}
		}
		if strings.HasPrefix(line, "• [") && strings.Contains(line, " seconds]") {
			p.done++
			if p.done%10 == 0 {
				fmt.Fprintf(p.w, "… %d specs done\n", p.done)
			}
		}
	}
	return len(b), nil
}
