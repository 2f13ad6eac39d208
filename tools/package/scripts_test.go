package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ilnp/internal/nstest"
)

// TestMaintainerScripts runs dist/deb's scripts as dpkg would on a live system, with systemctl,
// ilnpd, ilnpctl and uname replaced by stubs that record their calls, and the script's fixed
// paths (the configuration, systemd's marker directory, the state directory) moved into a
// temporary directory.
func TestMaintainerScripts(t *testing.T) {
	nstest.RequireTool(t, "sh", "sed", "head")
	root := repoRoot(t)
	type tc struct {
		name    string
		script  string
		args    []string
		systemd bool     // systemd is running (its marker directory exists)
		state   bool     // the default state directory exists
		conf    string   // extra configuration lines
		sock    bool     // a control socket in the configured state-dir
		env     []string // extra environment (STUB_FAIL=cmd makes that stub fail)
		kernel  string
		wantRC  int
		want    []string // calls, CONF and DIR stand for the paths
		stderr  string   // a substring of stderr ("" : stderr empty)
	}
	cases := []tc{
		{name: "install", script: "postinst", args: []string{"configure", ""}, systemd: true,
			want: []string{"systemctl daemon-reload"}},
		{name: "upgrade restarts", script: "postinst", args: []string{"configure", "1.0.0"}, systemd: true,
			want: []string{"systemctl daemon-reload", "systemctl try-restart ilnpd.service"}},
		{name: "upgrade, restart refused", script: "postinst", args: []string{"configure", "1.0.0"}, systemd: true,
			env:  []string{"STUB_FAIL=systemctl"},
			want: []string{"systemctl daemon-reload", "systemctl try-restart ilnpd.service"}, stderr: "ilnpd did not restart"},
		{name: "no systemd, old kernel", script: "postinst", args: []string{"configure", "1.0.0"}, kernel: "6.1.0-18-amd64",
			stderr: "ilnpd needs 6.6 or later"},
		{name: "kernel 5.15", script: "postinst", args: []string{"configure", ""}, kernel: "5.15.0", stderr: "has no TCX"},
		{name: "kernel 6.6", script: "postinst", args: []string{"configure", ""}, kernel: "6.6.0"},
		{name: "chrootless dpkg --root", script: "postinst", args: []string{"configure", "1.0.0"}, systemd: true,
			env: []string{"DPKG_ROOT=/nonexistent"}},
		{name: "prerm upgrade keeps ilnpd", script: "prerm", args: []string{"upgrade", "1.1.0"}, systemd: true, state: true},
		{name: "remove flushes", script: "prerm", args: []string{"remove"}, systemd: true, state: true,
			want: []string{"systemctl disable --now ilnpd.service", "ilnpd -flush -config CONF"}},
		{name: "remove, never ran", script: "prerm", args: []string{"remove"}, systemd: true,
			want: []string{"systemctl disable --now ilnpd.service"}},
		{name: "remove, no systemd", script: "prerm", args: []string{"remove"}, state: true,
			want: []string{"ilnpd -flush -config CONF"}},
		{name: "remove, flush fails", script: "prerm", args: []string{"remove"}, state: true,
			env: []string{"STUB_FAIL=ilnpd"}, wantRC: 1,
			want: []string{"ilnpd -flush -config CONF"}, stderr: "ILNP_REMOVE_WITHOUT_FLUSH=1"},
		{name: "remove without flush", script: "prerm", args: []string{"remove"}, state: true,
			env: []string{"STUB_FAIL=ilnpd", "ILNP_REMOVE_WITHOUT_FLUSH=1"}, stderr: "what ilnpd attached stays"},
		{name: "remove, daemon run by hand in its own state-dir", script: "prerm", args: []string{"remove"},
			conf: "state-dir DIR/custom   # by hand", sock: true,
			want: []string{"ilnpctl -s DIR/custom/ctl.sock flush", "ilnpd -flush -config CONF"}},
		{name: "chrootless remove", script: "prerm", args: []string{"remove"}, systemd: true, state: true,
			env: []string{"DPKG_ROOT=/nonexistent"}},
		{name: "postrm remove", script: "postrm", args: []string{"remove"}, systemd: true,
			want: []string{"systemctl daemon-reload"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			log := filepath.Join(dir, "calls")
			stub := `#!/bin/sh
echo "${0##*/} $*" >>"$STUB_LOG"
if [ "${0##*/}" = uname ]; then echo "$STUB_KERNEL"; fi
[ "${STUB_FAIL:-}" != "${0##*/}" ]
`
			for _, name := range []string{"systemctl", "ilnpd", "ilnpctl", "uname"} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte(stub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			conf := filepath.Join(dir, "ilnpd.conf")
			text := "interfaces eth0\n" + strings.ReplaceAll(c.conf, "DIR", dir) + "\n"
			if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			sysd, state := filepath.Join(dir, "systemd"), filepath.Join(dir, "state")
			for _, d := range []struct {
				on   bool
				path string
			}{{c.systemd, sysd}, {c.state, state}} {
				if d.on {
					if err := os.Mkdir(d.path, 0o755); err != nil {
						t.Fatal(err)
					}
				}
			}
			if c.sock {
				if err := os.Mkdir(filepath.Join(dir, "custom"), 0o700); err != nil {
					t.Fatal(err)
				}
				l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "custom", "ctl.sock"), Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				l.SetUnlinkOnClose(false)
				l.Close()
			}

			src, err := os.ReadFile(filepath.Join(root, "dist", "deb", c.script))
			if err != nil {
				t.Fatal(err)
			}
			script := string(src)
			for from, to := range map[string]string{"/run/systemd/system": sysd, "/etc/ilnp/ilnpd.conf": conf, "state=/run/ilnpd": "state=" + state} {
				if from == "state=/run/ilnpd" && c.script != "prerm" || from == "/etc/ilnp/ilnpd.conf" && c.script != "prerm" {
					continue
				}
				if !strings.Contains(script, from) {
					t.Fatalf("dist/deb/%s no longer has %q: update this test", c.script, from)
				}
				script = strings.ReplaceAll(script, from, to)
			}
			path := filepath.Join(dir, c.script)
			if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}

			kernel := c.kernel
			if kernel == "" {
				kernel = "6.18.44-amd64"
			}
			cmd := exec.Command("/bin/sh", append([]string{path}, c.args...)...)
			cmd.Env = append([]string{"PATH=" + bin + ":/usr/sbin:/usr/bin:/sbin:/bin", "STUB_LOG=" + log,
				"STUB_KERNEL=" + kernel}, c.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			rc := 0
			if err := cmd.Run(); err != nil {
				exit, ok := err.(*exec.ExitError)
				if !ok {
					t.Fatal(err)
				}
				rc = exit.ExitCode()
			}
			data, _ := os.ReadFile(log)
			var calls []string
			for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				l = strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(l, conf, "CONF"), dir, "DIR"))
				if l != "" && !strings.HasPrefix(l, "uname") {
					calls = append(calls, l)
				}
			}
			if rc != c.wantRC || !slices.Equal(calls, c.want) {
				t.Errorf("%s %v: exit %d, calls %q; want exit %d, calls %q\nstderr: %s",
					c.script, c.args, rc, calls, c.wantRC, c.want, stderr.String())
			}
			if c.stderr == "" && stderr.Len() != 0 || !strings.Contains(stderr.String(), c.stderr) {
				t.Errorf("stderr %q, want %q", stderr.String(), c.stderr)
			}
		})
	}
}

// TestPostrmPurge: purge under DPKG_ROOT removes the logs and an empty /etc/ilnp, and keeps a
// /etc/ilnp that holds the administrator's own files (a hosts file, a TSIG key).
func TestPostrmPurge(t *testing.T) {
	nstest.RequireTool(t, "sh")
	root := repoRoot(t)
	for _, keepHosts := range []bool{false, true} {
		dir := t.TempDir()
		for _, d := range []string{"var/log/ilnpd", "etc/ilnp", "run/ilnpd/bpf"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "var/log/ilnpd/events.jsonl"), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if keepHosts {
			if err := os.WriteFile(filepath.Join(dir, "etc/ilnp/hosts"), []byte("# mine\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("/bin/sh", filepath.Join(root, "dist", "deb", "postrm"), "purge")
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DPKG_ROOT=" + dir}
		if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
			t.Fatalf("postrm purge: %v %q", err, out)
		}
		for d, want := range map[string]bool{"var/log/ilnpd": false, "run/ilnpd": false, "etc/ilnp": keepHosts, "etc/ilnp/hosts": keepHosts} {
			if _, err := os.Stat(filepath.Join(dir, d)); (err == nil) != want {
				t.Errorf("keepHosts %v: %s exists %v, want %v", keepHosts, d, err == nil, want)
			}
		}
	}
}

// TestScriptsShellcheck: the scripts are POSIX sh (dash runs them) without shellcheck findings.
func TestScriptsShellcheck(t *testing.T) {
	nstest.RequireTool(t, "shellcheck")
	root := repoRoot(t)
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		out, err := exec.Command("shellcheck", "--shell=sh", "--severity=style", filepath.Join(root, "dist", "deb", s)).CombinedOutput()
		if err != nil {
			t.Errorf("shellcheck dist/deb/%s: %v\n%s", s, err, out)
		}
	}
}
