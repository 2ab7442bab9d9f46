// Package tap is `nodelet tap`: it prints every message on the bus as it
// flows — heartbeats, events and bucket updates — decoded and filterable,
// with the read-only tap credential.
package tap

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// Options select what to show.
type Options struct {
	// Subject is a NATS subject filter; empty shows everything nodelet
	// publishes (nodelet.v1.> and the nodelet_v1_* buckets).
	Subject string
	// Pod shows only messages about this pod (name, namespace/name or UID).
	Pod string
	// Schema shows only messages of this schema (nodelet.v1.X or X).
	Schema string
	// JSON prints one JSON object per line.
	JSON bool
	// Since first replays what the events stream and the buckets stored in
	// this recent window, then follows live. Zero replays nothing.
	Since time.Duration
	// Color marks up the text form with ANSI colours (for a terminal).
	Color bool
}

// Line is one message as tap prints it with --json.
type Line struct {
	Time     time.Time `json:"time"`
	Subject  string    `json:"subject"`
	Schema   string    `json:"schema,omitempty"`
	Producer string    `json:"producer,omitempty"`
	Op       string    `json:"op,omitempty"` // put or delete for bucket updates
	Bucket   string    `json:"bucket,omitempty"`
	Key      string    `json:"key,omitempty"`
	Summary  string    `json:"summary"`
	// Level is "warning" for what an operator should look at: Warning
	// events, rejections, containers that failed or wait on a back-off,
	// daemons that are not ready.
	Level string          `json:"level,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// Run prints messages to out until ctx is done. With o.Since it first
// prints what was stored in that window, then what arrived meanwhile (each
// message once), then follows live.
func Run(ctx context.Context, c *bus.Conn, o Options, out io.Writer) error {
	subjects := []string{bus.Prefix + ">", "$KV.>"}
	if o.Subject != "" {
		subjects = []string{o.Subject}
	}
	var (
		mu        sync.Mutex
		buffering = o.Since > 0
		buffered  []*nats.Msg
	)
	show := func(m *nats.Msg, at time.Time) {
		l, ok := describeAt(m, at)
		if !ok || !o.match(l) {
			return
		}
		if o.JSON {
			b, _ := json.Marshal(l)
			fmt.Fprintln(out, string(b))
			return
		}
		if o.Color {
			fmt.Fprintln(out, l.ColorText())
			return
		}
		fmt.Fprintln(out, l.Text())
	}
	handle := func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if buffering {
			buffered = append(buffered, m)
			return
		}
		show(m, time.Now().UTC())
	}
	for _, s := range subjects {
		sub, err := c.NC.Subscribe(s, handle)
		if err != nil {
			return fmt.Errorf("tap %s: %w", s, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	if err := c.NC.Flush(); err != nil {
		return err
	}
	if o.Since > 0 {
		// Live messages are held while the replay runs; those the replay
		// already showed are dropped, the rest follow in arrival order.
		stored, err := replay(ctx, c, o.Subject, time.Now().Add(-o.Since))
		mu.Lock()
		seen := make(map[string]bool, len(stored))
		for _, s := range stored {
			seen[identity(s.Msg)] = true
			show(s.Msg, s.Time)
		}
		if !o.JSON {
			fmt.Fprintln(out, separator(o.Color, fmt.Sprintf("%d stored in the last %s; live from here", len(stored), o.Since)))
		}
		for _, m := range buffered {
			if !seen[identity(m)] {
				show(m, time.Now().UTC())
			}
		}
		buffering, buffered = false, nil
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	<-ctx.Done()
	return nil
}

// Describe turns a bus message into a Line; ok is false for messages that
// are not nodelet's (other buckets, JetStream internals).
func Describe(m *nats.Msg) (Line, bool) { return describeAt(m, time.Now().UTC()) }

// describeAt is Describe for a message that arrived (or was stored) at at,
// the time of lines whose message carries none (deletes, undecodable).
func describeAt(m *nats.Msg, at time.Time) (Line, bool) {
	l := Line{Time: at, Subject: m.Subject}
	if strings.HasPrefix(m.Subject, "$KV.") {
		rest := strings.TrimPrefix(m.Subject, "$KV.")
		bucket, key, _ := strings.Cut(rest, ".")
		if !strings.HasPrefix(bucket, "nodelet_v1_") {
			return l, false
		}
		l.Bucket, l.Key, l.Op = bucket, key, "put"
		if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			l.Op = "delete"
			l.Summary = "deleted " + key
			return l, true
		}
	} else if !strings.HasPrefix(m.Subject, bus.Prefix) {
		return l, false
	}
	env, err := schemas.Open(m.Data)
	if err != nil {
		l.Summary = "undecodable: " + err.Error()
		l.Level = LevelWarning
		return l, true
	}
	l.Time, l.Schema, l.Producer, l.Data = env.Time, env.Schema, env.Producer, env.Data
	l.Summary = Summarize(env)
	if Warning(env) {
		l.Level = LevelWarning
	}
	return l, true
}

// Text is the human form of a line.
func (l Line) Text() string {
	schema := schemas.ShortName(l.Schema)
	if schema == "" {
		schema = "-"
	}
	where := l.Subject
	if l.Bucket != "" {
		where = strings.TrimPrefix(l.Bucket, "nodelet_v1_") + "/" + l.Key
	}
	return fmt.Sprintf("%s %-44s %-16s %-10s %s", l.Time.Local().Format("15:04:05.000"), where, schema, l.Producer, l.Summary)
}

func (o Options) match(l Line) bool {
	if o.Schema != "" && l.Schema != o.Schema && schemas.ShortName(l.Schema) != o.Schema {
		return false
	}
	if o.Pod != "" && !mentionsPod(l, o.Pod) {
		return false
	}
	return true
}

// mentionsPod looks for the pod in the key, subject and the usual fields.
func mentionsPod(l Line, pod string) bool {
	if l.Key == pod || strings.HasPrefix(l.Key, pod+".") || strings.HasSuffix(l.Subject, "."+pod) {
		return true
	}
	var d struct {
		UID, Name, Namespace string
		Pod                  *struct {
			Metadata struct{ Name, Namespace, UID string } `json:"metadata"`
		} `json:"pod"`
		Object struct{ Name, Namespace, UID string } `json:"object"`
	}
	if json.Unmarshal(l.Data, &d) != nil {
		return false
	}
	cands := [][3]string{{d.Namespace, d.Name, d.UID}, {d.Object.Namespace, d.Object.Name, d.Object.UID}}
	if d.Pod != nil {
		cands = append(cands, [3]string{d.Pod.Metadata.Namespace, d.Pod.Metadata.Name, d.Pod.Metadata.UID})
	}
	for _, c := range cands {
		if c[1] == "" && c[2] == "" {
			continue
		}
		if pod == c[2] || pod == c[1] || pod == c[0]+"/"+c[1] {
			return true
		}
	}
	return false
}
