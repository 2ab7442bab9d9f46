package csitest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Process is a driver running as its own process.
type Process struct {
	Config Config
	cmd    *exec.Cmd
	done   chan struct{}
}

// Start runs the driver as a child of the test binary (which must call
// MainIfDriver from its TestMain) and waits for its registration socket.
// It is killed when the test ends.
func Start(t testing.TB, cfg Config) *Process {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.RegistryDir, 0o750); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(cfg.DataDir, "driver.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envConfig+"="+string(raw))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{Config: cfg, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.Stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if fi, err := os.Stat(cfg.RegistrationSocket()); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return p
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(filepath.Join(cfg.DataDir, "driver.log"))
			t.Fatalf("csitest driver exited: %s", b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("csitest driver: no registration socket after 30s")
		}
	}
}

// Stop stops the driver (SIGTERM: it removes its registration socket).
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Calls reads calls.log.
func (p *Process) Calls() []Call {
	f, err := os.Open(filepath.Join(p.Config.DataDir, "calls.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []Call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var c Call
		if json.Unmarshal(sc.Bytes(), &c) == nil {
			out = append(out, c)
		}
	}
	return out
}

// Count counts calls of method for volumeID ("" any volume).
func (p *Process) Count(method, volumeID string) int {
	n := 0
	for _, c := range p.Calls() {
		if c.Method == method && (volumeID == "" || c.VolumeID == volumeID) {
			n++
		}
	}
	return n
}

// VolumeData is the directory holding the data of volumeID.
func (p *Process) VolumeData(volumeID string) string {
	return filepath.Join(p.Config.DataDir, "volumes", volumeID)
}

// Image is the image file of the raw block volume volumeID.
func (p *Process) Image(volumeID string) string {
	return filepath.Join(p.Config.DataDir, "volumes", volumeID+".img")
}
