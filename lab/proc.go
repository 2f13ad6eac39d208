package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/lab/netns"
)

// Proc is a process the lab started inside a namespace, its output in a log file.
type Proc struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
	err     error
}

// Start runs args inside ns with output to DIR/NAME.log; Close stops it.
func (t *Topology) Start(ns *netns.NS, name string, args ...string) (*Proc, error) {
	return t.StartEnv(ns, name, nil, args...)
}

// StartEnv is Start with extra environment variables.
func (t *Topology) StartEnv(ns *netns.NS, name string, env []string, args ...string) (*Proc, error) {
	logPath := filepath.Join(t.Cfg.Dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := ns.Command(args...)
	if len(args) > 0 && args[0] == "iperf3" {
		t.window.Apply(cmd) // the thesis's TCP window (lab/window.go), when the run clamps it
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s) in %s: %w", name, strings.Join(args, " "), ns.Name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.mu.Lock()
	closed := t.closed
	t.procs = append(t.procs, p)
	t.mu.Unlock()
	if closed {
		p.Stop(time.Second)
		return nil, fmt.Errorf("start %s: testbed is closing", name)
	}
	return p, nil
}

// Exited reports whether the process ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Wait waits up to limit for the process to end by itself.
func (p *Proc) Wait(limit time.Duration) (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	case <-time.After(limit):
		return false, nil
	}
}

// Stop sends SIGTERM, then SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	if done, _ := p.Exited(); done {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if ok, _ := p.Wait(grace); !ok {
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Log returns what the process wrote so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

func unmount(target string) error { return unix.Unmount(target, unix.MNT_DETACH) }

func (t *Topology) procsNamed(prefix string) []*Proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ps []*Proc
	for _, p := range t.procs {
		if strings.HasPrefix(p.Name, prefix) {
			ps = append(ps, p)
		}
	}
	return ps
}
