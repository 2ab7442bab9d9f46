package server

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	crilogs "k8s.io/cri-client/pkg/logs"
	"k8s.io/utils/ptr"
)

func TestParseLogOptions(t *testing.T) {
	since := "2026-12-03T10:00:00Z"
	for _, tc := range []struct {
		query string
		err   error
		check func(t *testing.T, q string)
	}{
		{query: ""},
		{query: "follow=true&previous=1&timestamps=true&tailLines=10&limitBytes=100&sinceSeconds=5"},
		{query: "tail=all"},
		{query: "tail=3"},
		{query: "sinceTime=" + since},
		{query: "insecureSkipTLSVerifyBackend=true"},
		{query: "follow=maybe", err: errBadQuery},
		{query: "tailLines=x", err: errBadQuery},
		{query: "limitBytes=1k", err: errBadQuery},
		{query: "sinceTime=yesterday", err: errBadQuery},
		{query: "tailLines=-1", err: errInvalidQuery},
		{query: "limitBytes=0", err: errInvalidQuery},
		{query: "sinceSeconds=0", err: errInvalidQuery},
		{query: "sinceSeconds=5&sinceTime=" + since, err: errInvalidQuery},
	} {
		t.Run(tc.query, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			o, err := parseLogOptions(q)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			switch tc.query {
			case "follow=true&previous=1&timestamps=true&tailLines=10&limitBytes=100&sinceSeconds=5":
				if !o.Follow || !o.Previous || !o.Timestamps || *o.TailLines != 10 || *o.LimitBytes != 100 || *o.SinceSeconds != 5 {
					t.Errorf("options = %+v", o)
				}
			case "tail=all":
				if o.TailLines != nil {
					t.Errorf("tail=all: tailLines = %d", *o.TailLines)
				}
			case "tail=3":
				if o.TailLines == nil || *o.TailLines != 3 {
					t.Errorf("tail=3: tailLines = %v", o.TailLines)
				}
			case "sinceTime=" + since:
				if o.SinceTime == nil || o.SinceTime.UTC().Format(time.RFC3339) != since {
					t.Errorf("sinceTime = %v", o.SinceTime)
				}
			}
		})
	}
}

func TestCRILogOptions(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	q, _ := url.ParseQuery("sinceSeconds=60&tailLines=2&limitBytes=7&follow=true&timestamps=true")
	o, err := parseLogOptions(q)
	if err != nil {
		t.Fatal(err)
	}
	got := criLogOptions(o, now)
	if !got.Since.Equal(now.Add(-time.Minute)) || *got.TailLines != 2 || *got.LimitBytes != 7 || !got.Follow || !got.Timestamp {
		t.Errorf("criLogOptions = %+v", got)
	}
}

// criLog is a CRI log file: stdout and stderr lines, a line split in two
// partial records, at known times.
const criLog = `2026-12-03T10:00:00.000000000Z stdout F one
2026-12-03T10:00:01.000000000Z stderr F two
2026-12-03T10:00:02.000000000Z stdout P thr
2026-12-03T10:00:02.500000000Z stdout F ee
2026-12-03T10:00:03.000000000Z stdout F four
`

// TestReadLogs checks what /containerLogs answers for a CRI log file with
// the options kubectl sends, through the reader the server uses.
func TestReadLogs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(criLog), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		opts           crilogs.LogOptions
		stdout, stderr bool
		want           string
	}{
		{name: "all", stdout: true, stderr: true, want: "one\ntwo\nthree\nfour\n"},
		{name: "stdout only", stdout: true, want: "one\nthree\nfour\n"},
		{name: "stderr only", stderr: true, want: "two\n"},
		// tailLines counts records of the file, as the kubelet's reader
		// does: the last two are the second half of "three" and "four".
		{name: "tail 2", opts: crilogs.LogOptions{TailLines: ptr.To[int64](2)}, stdout: true, stderr: true, want: "ee\nfour\n"},
		{name: "tail 3", opts: crilogs.LogOptions{TailLines: ptr.To[int64](3)}, stdout: true, stderr: true, want: "three\nfour\n"},
		{name: "tail 0", opts: crilogs.LogOptions{TailLines: ptr.To[int64](0)}, stdout: true, stderr: true, want: ""},
		{name: "since", opts: crilogs.LogOptions{Since: time.Date(2026, 12, 3, 10, 0, 1, 500, time.UTC)}, stdout: true, stderr: true, want: "three\nfour\n"},
		{name: "limit", opts: crilogs.LogOptions{LimitBytes: ptr.To[int64](6)}, stdout: true, stderr: true, want: "one\ntw"},
		{name: "timestamps", opts: crilogs.LogOptions{TailLines: ptr.To[int64](1), Timestamp: true}, stdout: true, stderr: true,
			want: "2026-12-03T10:00:03.000000000Z four\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			var so, se *bytes.Buffer
			if tc.stdout {
				so = &out
			}
			if tc.stderr {
				se = &out
			}
			opts := tc.opts
			if err := crilogs.ReadLogs(context.Background(), path, "", &opts, nil, writerOrNil(so), writerOrNil(se)); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got %q, want %q", out.String(), tc.want)
			}
		})
	}
}

// writerOrNil keeps a nil *bytes.Buffer a nil io.Writer, as the handler
// passes a nil writer for a stream not asked for.
func writerOrNil(b *bytes.Buffer) interface{ Write([]byte) (int, error) } {
	if b == nil {
		return nil
	}
	return b
}
