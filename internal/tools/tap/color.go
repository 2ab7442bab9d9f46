package tap

import (
	"fmt"
	"strings"

	"github.com/nodelet/nodelet/schemas"
)

// ANSI escapes for the text form on a terminal.
const (
	ansiReset   = "\x1b[0m"
	ansiDim     = "\x1b[2m"
	ansiBold    = "\x1b[1m"
	ansiRed     = "\x1b[31m"
	ansiGreen   = "\x1b[32m"
	ansiYellow  = "\x1b[33m"
	ansiBlue    = "\x1b[34m"
	ansiMagenta = "\x1b[35m"
	ansiCyan    = "\x1b[36m"
)

// producerColors gives each component one colour, so that a reader follows
// a daemon down the screen.
var producerColors = map[string]string{
	"sources":    ansiGreen,
	"admission":  ansiYellow,
	"runtime":    ansiBlue,
	"prober":     ansiMagenta,
	"status":     ansiCyan,
	"gc":         ansiBold,
	"supervisor": ansiDim,
}

func paint(code, s string) string {
	if code == "" {
		return s
	}
	return code + s + ansiReset
}

// ColorText is Text with colours: dim time, the producer in its own colour,
// heartbeats dim, deletes dim, warnings red. Columns line up as in Text.
func (l Line) ColorText() string {
	schema := schemas.ShortName(l.Schema)
	if schema == "" {
		schema = "-"
	}
	where := l.Subject
	if l.Bucket != "" {
		where = strings.TrimPrefix(l.Bucket, "nodelet_v1_") + "/" + l.Key
	}
	summary := l.Summary
	switch {
	case l.Level == LevelWarning:
		summary = paint(ansiRed, summary)
	case l.Op == "delete", schema == "Heartbeat":
		summary = paint(ansiDim, summary)
	}
	return fmt.Sprintf("%s %s %s %s %s",
		paint(ansiDim, l.Time.Local().Format("15:04:05.000")),
		fmt.Sprintf("%-44s", where),
		paint(ansiBold, fmt.Sprintf("%-16s", schema)),
		paint(producerColors[l.Producer], fmt.Sprintf("%-10s", l.Producer)),
		summary)
}

// separator is the line between the replay of --since and live messages.
func separator(color bool, text string) string {
	s := "── " + text + " ──"
	if color {
		return paint(ansiDim, s)
	}
	return s
}
