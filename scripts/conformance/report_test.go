package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseReport(t *testing.T) {
	for _, tc := range []struct {
		name                             string
		json                             string
		passed, failed, skipped, select_ int
		failures                         []string
		errContains                      string
	}{
		{
			name: "mixed",
			json: `[{"PreRunStats":{"TotalSpecs":10,"SpecsThatWillRun":4},"SpecReports":[
				{"LeafNodeType":"SynchronizedBeforeSuite","State":"passed"},
				{"ContainerHierarchyTexts":["[sig-node] Pods"],"LeafNodeText":"should run","LeafNodeType":"It","State":"passed"},
				{"ContainerHierarchyTexts":["[sig-node] Pods"],"LeafNodeText":"should log","LeafNodeType":"It","State":"failed",
				 "Failure":{"Message":"pods/log: 404\nstack"}},
				{"ContainerHierarchyTexts":["[sig-node] Probe"],"LeafNodeText":"times out","LeafNodeType":"It","State":"timedout","Failure":{"Message":"timeout"}},
				{"LeafNodeText":"filtered","LeafNodeType":"It","State":"skipped"},
				{"LeafNodeText":"skipped at run time","LeafNodeType":"It","State":"skipped","Failure":{"Message":"Only supported for providers [gce]"}}]}]`,
			passed: 1, failed: 2, skipped: 1, select_: 4,
			failures: []string{"[sig-node] Pods should log: pods/log: 404", "[sig-node] Probe times out: timeout"},
		},
		{
			name: "before suite failed",
			json: `[{"PreRunStats":{"TotalSpecs":3,"SpecsThatWillRun":3},"SpecReports":[
				{"LeafNodeType":"SynchronizedBeforeSuite","State":"failed","Failure":{"Message":"nodes not schedulable"}}]}]`,
			select_: 3, failures: []string{"[SynchronizedBeforeSuite]: nodes not schedulable"},
		},
		{name: "not json", json: `<html>`, errContains: "not a ginkgo JSON report"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseReport([]byte(tc.json))
			if tc.errContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errContains) {
					t.Fatalf("err = %v, want %q", err, tc.errContains)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Passed != tc.passed || s.Failed != tc.failed || s.Skipped != tc.skipped || s.Selected != tc.select_ {
				t.Errorf("counts = %+v", s)
			}
			var got []string
			for _, f := range s.Failures {
				got = append(got, f.Name+": "+f.Message)
			}
			if strings.Join(got, "|") != strings.Join(tc.failures, "|") {
				t.Errorf("failures = %q, want %q", got, tc.failures)
			}
		})
	}
}

func TestPrintSummary(t *testing.T) {
	s := &summary{Selected: 3, Total: 9, Passed: 2, Failed: 1, Failures: []failure{{"a b", "failed", "boom"}}}
	var b bytes.Buffer
	s.print(&b, 90*time.Second)
	want := "2 passed, 1 failed, 0 skipped at run time, of 3 selected specs (9 in the suite) in 1m30s\nFAIL [failed] a b\n     boom\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("got %q", b.String())
	}
}
