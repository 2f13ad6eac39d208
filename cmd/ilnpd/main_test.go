package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildIlnpd builds this command into a temporary directory.
func buildIlnpd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ilnpd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestCheck runs `ilnpd -check` on good and bad files: a good one is accepted without touching
// the system, a bad one is refused with exit status 1 and FILE:LINE: reason on stderr, and the
// shipped example configuration is valid.
func TestCheck(t *testing.T) {
	bin := buildIlnpd(t)
	dir := t.TempDir()
	cases := []struct {
		name, text string
		wantErr    string // "" for a valid file
	}{
		{"minimal", "interfaces eth0\n", ""},
		{"full", "node mn\ninterfaces mn1 mn2\nnid 0214:4fff:fe20:ee64\nhandoff hard\nstate-dir /run/ilnpd-test\n" +
			"dns-listen [::1]:53\nlu-initial-timeout 500ms\nlu-max-attempts 3\n", ""},
		{"no interfaces", "node mn\n", "interfaces"},
		{"bad handoff", "interfaces eth0\nhandoff sideways\n", ":2:"},
		{"bad nid", "interfaces eth0\nnid 12:zz\n", ":2:"},
		{"duplicate key", "interfaces eth0\ninterfaces eth1\n", ":2:"},
		{"unknown key", "interfaces eth0\n# comment\nwarp-drive on\n", ":3:"},
		{"bad nonce size", "interfaces eth0\nnonce-size 8\n", ":2:"},
		{"relative state dir", "interfaces eth0\nstate-dir run/ilnpd\n", ":2:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conf := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".conf")
			if err := os.WriteFile(conf, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "-check", "-config", conf)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if c.wantErr == "" {
				if err != nil || !strings.Contains(stdout.String(), "configuration ok") {
					t.Fatalf("ilnpd -check on a valid file: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
				}
				return
			}
			var exit *exec.ExitError
			if err == nil || !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("ilnpd -check on a bad file: %v, want exit status 1\nstdout: %s", err, stdout.String())
			}
			msg := stderr.String()
			if !strings.HasPrefix(msg, "ilnpd: ") || !strings.Contains(msg, filepath.Base(conf)) || !strings.Contains(msg, c.wantErr) {
				t.Errorf("error %q: want \"ilnpd: \", the file name and %q", strings.TrimSpace(msg), c.wantErr)
			}
		})
	}

	t.Run("shipped example", func(t *testing.T) {
		out, err := exec.Command(bin, "-check", "-config", filepath.Join("..", "..", "dist", "ilnpd.conf.example")).CombinedOutput()
		if err != nil {
			t.Fatalf("dist/ilnpd.conf.example: %v\n%s", err, out)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		out, err := exec.Command(bin, "-check", "-config", filepath.Join(dir, "absent.conf")).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "absent.conf") {
			t.Errorf("missing config: %v %q, want an error naming the file", err, out)
		}
	})
	t.Run("stray argument", func(t *testing.T) {
		out, err := exec.Command(bin, "-check", "extra").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "unexpected arguments") {
			t.Errorf("stray argument: %v %q, want a usage error", err, out)
		}
	})
}
