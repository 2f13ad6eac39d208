package scalesess

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Profiles (Config.ProfileDir): each daemon serves Go's profiles on a Unix socket there
// (ilnpd -pprof), and the run saves the CN's CPU profile of the mass move, the MN's of the
// fan-out and the CN's heap with its sessions open.

func (s *scaleRun) pprofSocket(name string) string {
	if s.cfg.ProfileDir == "" {
		return ""
	}
	return filepath.Join(s.cfg.ProfileDir, name+".sock")
}

// profile is a running fetch of one profile; wait saves it.
type profile struct {
	done chan error
}

// startProfile fetches /debug/pprof/what from the daemon name into ProfileDir/file; nil when
// profiling is off.
func (s *scaleRun) startProfile(ctx context.Context, name, what, file string) *profile {
	sock := s.pprofSocket(name)
	if sock == "" {
		return nil
	}
	p := &profile{done: make(chan error, 1)}
	go func() { p.done <- fetchProfile(ctx, sock, what, filepath.Join(s.cfg.ProfileDir, file)) }()
	return p
}

func (p *profile) wait(log io.Writer) {
	if p == nil {
		return
	}
	if err := <-p.done; err != nil {
		fmt.Fprintf(log, "scale: profile: %v\n", err)
	}
}

func fetchProfile(ctx context.Context, sock, what, out string) error {
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://ilnpd/debug/pprof/"+what, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s from %s: %w", what, sock, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s from %s: %s", what, sock, resp.Status)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("%s from %s: %w", what, sock, err)
	}
	return f.Close()
}
