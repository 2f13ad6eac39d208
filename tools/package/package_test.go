package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"ilnp/internal/control"
	"ilnp/internal/nstest"
)

func TestDebVersion(t *testing.T) {
	cases := []struct {
		describe, count, sha string
		dirty                bool
		want                 string
		wantErr              string
	}{
		{describe: "", count: "219", sha: "02dcaf7", want: "0.0.0+219.g02dcaf7"},
		{describe: "", count: "219", sha: "02dcaf7", dirty: true, want: "0.0.0+219.g02dcaf7.dirty"},
		{describe: "v1.2.3-0-g02dcaf7", count: "9", sha: "02dcaf7", want: "1.2.3"},
		{describe: "v1.2.3-0-g02dcaf7", count: "9", sha: "02dcaf7", dirty: true, want: "1.2.3+dirty"},
		{describe: "v1.2.3-4-g02dcaf7", count: "9", sha: "02dcaf7", want: "1.2.3+4.g02dcaf7"},
		{describe: "v1.2.3-rc1-4-g02dcaf7", count: "9", sha: "02dcaf7", want: "1.2.3~rc1+4.g02dcaf7"},
		{describe: "v1.2.3-rc1-0-g02dcaf7", count: "9", sha: "02dcaf7", want: "1.2.3~rc1"},
		{describe: "v2.0+deb1-3-gabcdef0", count: "9", sha: "abcdef0", want: "2.0+deb1.3.gabcdef0"},
		{describe: "release-1", count: "9", sha: "abcdef0", wantErr: "want vVERSION-N-gSHA"},
		{describe: "v1.0 x-0-gabc", count: "9", sha: "abc", wantErr: "want vVERSION-N-gSHA"},
		{describe: "", count: "x", sha: "02dcaf7", wantErr: "commit count"},
		{describe: "", count: "3", sha: "zz", wantErr: "not a hex"},
	}
	for _, c := range cases {
		got, err := debVersion(c.describe, c.count, c.sha, c.dirty)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("debVersion(%q, %q, %q) = %q, %v; want an error with %q", c.describe, c.count, c.sha, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("debVersion(%q, %q, %q, %v) = %q, %v; want %q", c.describe, c.count, c.sha, c.dirty, got, err, c.want)
		}
	}
	// Upgrades must order: dpkg --compare-versions agrees with the scheme.
	if _, err := exec.LookPath("dpkg"); err == nil {
		for _, p := range [][2]string{
			{"0.0.0+219.g02dcaf7", "0.0.0+220.g1234567"}, {"0.0.0+220.gffffff0", "0.0.0+1000.g0000000"},
			{"0.0.0+9.gabc", "1.0.0"}, {"1.2.3~rc1", "1.2.3"}, {"1.2.3", "1.2.3+4.g02dcaf7"},
			{"1.2.3+4.g02dcaf7", "1.2.4"},
		} {
			if err := exec.Command("dpkg", "--compare-versions", p[0], "lt", p[1]).Run(); err != nil {
				t.Errorf("dpkg says %s is not older than %s", p[0], p[1])
			}
		}
	}
}

func TestGitVersion(t *testing.T) {
	nstest.RequireTool(t, "git")
	root := repoRoot(t)
	v, err := gitVersion(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	sha, err := git(context.Background(), root, "rev-parse", "--short=7", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	exact, _ := git(context.Background(), root, "describe", "--tags", "--exact-match", "--match", "v[0-9]*")
	if !debVersionRE.MatchString(v) || (exact == "" && !strings.Contains(v, ".g"+sha)) {
		t.Fatalf("version %q: want a Debian version naming commit %s", v, sha)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestPackage builds the package, checks its metadata and contents, and installs, upgrades,
// removes and purges it in a scratch root with dpkg.
func TestPackage(t *testing.T) {
	nstest.RequireTool(t, "dpkg", "dpkg-deb", "dpkg-query", "go", "git")
	ctx := context.Background()
	root := repoRoot(t)
	out := t.TempDir()
	v1, err := build(ctx, options{Root: root, OutDir: out, Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, "ilnp_1.0.0_"+debArch(t)+".deb"); v1 != want {
		t.Fatalf("package at %s, want %s", v1, want)
	}

	t.Run("metadata", func(t *testing.T) {
		fields := map[string]string{}
		for _, f := range []string{"Package", "Version", "Architecture", "Maintainer", "Depends", "Section", "Description"} {
			fields[f] = strings.TrimSpace(run(t, "dpkg-deb", "-f", v1, f))
		}
		want := map[string]string{"Package": "ilnp", "Version": "1.0.0", "Architecture": debArch(t),
			"Depends": "iproute2", "Section": "net"}
		for k, v := range want {
			if fields[k] != v {
				t.Errorf("%s: %q, want %q", k, fields[k], v)
			}
		}
		if !strings.Contains(fields["Maintainer"], "@") || !strings.HasPrefix(fields["Description"], "ILNPv6 host mobility") {
			t.Errorf("maintainer %q, description %q", fields["Maintainer"], fields["Description"])
		}
		if got := strings.TrimSpace(run(t, "dpkg-deb", "-I", v1, "conffiles")); got != "/etc/ilnp/ilnpd.conf" {
			t.Errorf("conffiles: %q, want /etc/ilnp/ilnpd.conf", got)
		}
		for _, s := range []string{"postinst", "prerm", "postrm"} {
			want, err := os.ReadFile(filepath.Join(root, "dist", "deb", s))
			if err != nil {
				t.Fatal(err)
			}
			if got := run(t, "dpkg-deb", "-I", v1, s); got != string(want) {
				t.Errorf("%s in the package differs from dist/deb/%s", s, s)
			}
		}
	})

	t.Run("contents", func(t *testing.T) {
		listing := run(t, "dpkg-deb", "-c", v1)
		modes := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(listing), "\n") {
			f := strings.Fields(line)
			if len(f) < 6 {
				t.Fatalf("dpkg-deb -c line %q", line)
			}
			modes[strings.TrimPrefix(strings.TrimSuffix(f[len(f)-1], "/"), ".")] = f[0] + " " + f[1]
		}
		want := map[string]string{
			"/usr/sbin/ilnpd":                     "-rwxr-xr-x root/root",
			"/usr/sbin/ilnpctl":                   "-rwxr-xr-x root/root",
			"/lib/systemd/system/ilnpd.service":   "-rw-r--r-- root/root",
			"/etc/ilnp/ilnpd.conf":                "-rw-r--r-- root/root",
			"/usr/share/man/man8/ilnpd.8.gz":      "-rw-r--r-- root/root",
			"/usr/share/man/man8/ilnpctl.8.gz":    "-rw-r--r-- root/root",
			"/usr/share/man/man5/ilnpd.conf.5.gz": "-rw-r--r-- root/root",
			"/usr/share/doc/ilnp/copyright":       "-rw-r--r-- root/root",
		}
		for p, m := range want {
			if modes[p] != m {
				t.Errorf("%s: %q, want %q", p, modes[p], m)
			}
		}
		for p, m := range modes {
			if _, ok := want[p]; !ok && m[0] != 'd' {
				t.Errorf("unexpected file %s in the package", p)
			}
		}
	})

	// The scratch root: an empty dpkg database. --force-script-chrootless runs the maintainer
	// scripts here with DPKG_ROOT set (they touch nothing outside it); --log keeps the
	// machine's dpkg.log out of it; iproute2 is not in the scratch database.
	dir := t.TempDir()
	admin := filepath.Join(dir, "var", "lib", "dpkg")
	for _, d := range []string{"info", "updates"} {
		if err := os.MkdirAll(filepath.Join(admin, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(admin, "status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg := func(args ...string) string {
		t.Helper()
		return run(t, "dpkg", append([]string{"--root=" + dir, "--log=/dev/null", "--force-script-chrootless",
			"--force-not-root", "--force-depends"}, args...)...)
	}
	status := func() string {
		t.Helper()
		out, err := exec.Command("dpkg-query", "--admindir="+admin, "-W", "-f=${Status}|${Version}|${Conffiles}", "ilnp").Output()
		if err != nil {
			return "absent"
		}
		return strings.TrimSpace(string(out))
	}
	conf := filepath.Join(dir, "etc", "ilnp", "ilnpd.conf")
	example, err := os.ReadFile(filepath.Join(root, "dist", "ilnpd.conf.example"))
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(example)

	dpkg("-i", v1)
	if got, want := status(), "install ok installed|1.0.0| /etc/ilnp/ilnpd.conf "+hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("after install: %q, want %q", got, want)
	}
	copyright, err := os.ReadFile(filepath.Join(dir, "usr/share/doc/ilnp/copyright"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"usr/sbin/ilnpd", "usr/sbin/ilnpctl"} {
		checkStatic(t, filepath.Join(dir, p))
		checkCopyright(t, filepath.Join(dir, p), string(copyright))
	}
	if got, err := exec.Command(filepath.Join(dir, "usr/sbin/ilnpd"), "-check", "-config", conf).CombinedOutput(); err != nil ||
		strings.TrimSpace(string(got)) != "configuration ok" {
		t.Errorf("installed ilnpd -check on the installed conffile: %v %q", err, got)
	}
	if got, err := exec.Command(filepath.Join(dir, "usr/sbin/ilnpctl"), "-h").CombinedOutput(); err != nil ||
		!strings.Contains(string(got), "usage: ilnpctl") {
		t.Errorf("installed ilnpctl -h: %v %q", err, got)
	}
	checkUnit(t, dir)

	// Upgrade in place over an edited configuration: dpkg keeps the administrator's file
	// (the packaged one did not change) without a prompt or a .dpkg-dist beside it.
	edited := append(slices.Clone(example), "# edited by the administrator\n"...)
	if err := os.WriteFile(conf, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	v2, err := build(ctx, options{Root: root, OutDir: out, Version: "1.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(v1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("building 1.1.0 left 1.0.0 beside it: %v", err)
	}
	dpkg("-i", v2)
	if got := status(); !strings.HasPrefix(got, "install ok installed|1.1.0|") {
		t.Fatalf("after upgrade: %q", got)
	}
	if got, _ := os.ReadFile(conf); !bytes.Equal(got, edited) {
		t.Errorf("upgrade replaced the edited conffile")
	}
	if extra, _ := filepath.Glob(filepath.Join(dir, "etc", "ilnp", "*.dpkg-*")); len(extra) != 0 {
		t.Errorf("upgrade left %v", extra)
	}

	// Remove keeps the configuration, purge takes it and everything else.
	dpkg("-r", "ilnp")
	if got := status(); !strings.HasPrefix(got, "deinstall ok config-files|1.1.0|") {
		t.Fatalf("after remove: %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "usr/sbin/ilnpd")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after remove, ilnpd: %v", err)
	}
	if _, err := os.Stat(conf); err != nil {
		t.Errorf("remove took the conffile: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "var", "log", "ilnpd"), 0o755); err != nil { // as LogsDirectory= does
		t.Fatal(err)
	}
	dpkg("-P", "ilnp")
	if got := status(); got != "absent" {
		t.Fatalf("after purge: %q", got)
	}
	var left []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch rel {
		case ".", "var", "var/lib", "var/log":
			return nil
		case "var/lib/dpkg":
			return filepath.SkipDir
		}
		left = append(left, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("purge left %v", left)
	}
}

// checkStatic: the package depends on no libc, so the binaries must not need one.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: not static", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) != 0 {
		t.Errorf("%s needs %v", path, libs)
	}
}

// checkCopyright: the copyright file names every module the binary embeds.
func checkCopyright(t *testing.T, path, copyright string) {
	t.Helper()
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Deps) < 3 {
		t.Fatalf("%s: %d modules in its build info", path, len(info.Deps))
	}
	for _, d := range info.Deps {
		if !regexp.MustCompile(`(?m)^Files: .*\b` + regexp.QuoteMeta(d.Path) + `( |$)`).MatchString(copyright) {
			t.Errorf("%s embeds %s, which the copyright file does not name", path, d.Path)
		}
	}
}

// checkUnit: the installed unit runs the installed binaries, keeps the runtime directory (the
// pinned datapath) across stop, and its man pages are in the package.
func checkUnit(t *testing.T, dir string) {
	t.Helper()
	unit, err := os.ReadFile(filepath.Join(dir, "lib/systemd/system/ilnpd.service"))
	if err != nil {
		t.Fatal(err)
	}
	var execs int
	for _, line := range strings.Split(string(unit), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		switch {
		case strings.HasPrefix(k, "Exec"):
			execs++
			bin := strings.Fields(v)[0]
			if _, err := os.Stat(filepath.Join(dir, bin)); err != nil && bin != "/bin/kill" {
				t.Errorf("%s runs %s, which the package does not install", k, bin)
			}
		case k == "Documentation":
			for _, d := range strings.Fields(v) {
				m := regexp.MustCompile(`^man:([a-z.]+)\(([1-8])\)$`).FindStringSubmatch(d)
				if m == nil {
					continue
				}
				page := filepath.Join(dir, "usr/share/man", "man"+m[2], m[1]+"."+m[2]+".gz")
				if _, err := os.Stat(page); err != nil {
					t.Errorf("Documentation=%s: %v", d, err)
				}
			}
		}
	}
	for _, want := range []string{"ExecStart=/usr/sbin/ilnpd -config /etc/ilnp/ilnpd.conf", "RuntimeDirectoryPreserve=yes",
		"KillSignal=SIGTERM", "ConditionPathExists=/etc/ilnp/ilnpd.conf"} {
		if !strings.Contains(string(unit), "\n"+want+"\n") {
			t.Errorf("unit lacks %q", want)
		}
	}
	if execs < 3 {
		t.Errorf("unit has %d Exec lines", execs)
	}
}

func debArch(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(run(t, "dpkg", "--print-architecture"))
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestManPages: groff renders every page without a warning, and the pages document every key
// the configuration parser accepts, every ilnpctl command and table, and every ilnpd flag.
func TestManPages(t *testing.T) {
	nstest.RequireTool(t, "groff")
	root := repoRoot(t)
	page := func(name string) string {
		t.Helper()
		src := filepath.Join(root, "dist", "man", name)
		var stderr bytes.Buffer
		cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z", src)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() != 0 {
			t.Errorf("groff %s: %v %s", name, err, stderr.String())
		}
		text, err := exec.Command("groff", "-man", "-rHY=0", "-rLL=200n", "-Tascii", "-P", "-cbou", src).Output()
		if err != nil {
			t.Fatalf("groff %s: %v", name, err)
		}
		return string(text)
	}
	source := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// documented: word appears as a word of text (line breaks and hyphenation aside).
	documented := func(text, word string) bool {
		text = strings.Join(strings.Fields(text), " ")
		return regexp.MustCompile(`(^|[^a-z-])` + regexp.QuoteMeta(word) + `($|[^a-z-])`).MatchString(text)
	}

	conf := page("ilnpd.conf.5")
	keys := regexp.MustCompile(`(?m)^\t\t"([a-z-]+)":`).FindAllStringSubmatch(source("internal/config/config.go"), -1)
	if len(keys) < 25 {
		t.Fatalf("found %d keys in internal/config/config.go's setters, want every one", len(keys))
	}
	for _, k := range keys {
		if !regexp.MustCompile(`(?m)^ {7}` + regexp.QuoteMeta(k[1]) + `( |$)`).MatchString(conf) {
			t.Errorf("ilnpd.conf(5) has no entry for key %q", k[1])
		}
	}

	ctl := page("ilnpctl.8")
	usage := regexp.MustCompile("(?s)const usage = `(.*?)`").FindStringSubmatch(source("cmd/ilnpctl/main.go"))
	if usage == nil {
		t.Fatal("no usage text in cmd/ilnpctl/main.go")
	}
	cmds := regexp.MustCompile(`(?m)^  ([a-z]+(?: [a-z][a-z-]*)?)`).FindAllStringSubmatch(usage[1], -1)
	if len(cmds) < 4 {
		t.Fatalf("found %d commands in ilnpctl's usage", len(cmds))
	}
	for _, c := range cmds {
		word := c[1]
		if strings.HasPrefix(word, "show ") { // "show locators": tables are checked below
			word = "show"
		}
		if !documented(ctl, word) {
			t.Errorf("ilnpctl(8) does not document %q", word)
		}
	}
	for _, w := range control.Whats {
		if !documented(ctl, "show "+string(w)) {
			t.Errorf("ilnpctl(8) does not document \"show %s\"", w)
		}
	}
	for _, o := range []string{"-s", "-j", "-h"} {
		if !documented(ctl, o) {
			t.Errorf("ilnpctl(8) does not document %s", o)
		}
	}

	d := page("ilnpd.8")
	flags := regexp.MustCompile(`flag\.[A-Za-z]+\("([a-z-]+)"`).FindAllStringSubmatch(source("cmd/ilnpd/main.go"), -1)
	if len(flags) < 2 {
		t.Fatalf("found %d flags in cmd/ilnpd/main.go", len(flags))
	}
	for _, f := range flags {
		if !documented(d, "-"+f[1]) {
			t.Errorf("ilnpd(8) does not document -%s", f[1])
		}
	}
	// The full stop that the contract names, and that the package's prerm runs, is
	// documented where users look for it, even before the commands carry it.
	for _, want := range []string{"ilnpd -flush", "ilnpctl flush"} {
		if !documented(d, want) {
			t.Errorf("ilnpd(8) does not explain %q", want)
		}
	}
	if !documented(ctl, "flush") {
		t.Error("ilnpctl(8) does not document flush")
	}
}

// TestGzipReproducible: the same man page gives the same bytes (no name, no time stamp).
func TestGzipReproducible(t *testing.T) {
	src := filepath.Join(repoRoot(t), "dist", "man", "ilnpd.8")
	dir := t.TempDir()
	var outs [2][]byte
	for i := range outs {
		dst := filepath.Join(dir, "p.gz")
		if err := gzipFile(src, dst); err != nil {
			t.Fatal(err)
		}
		var err error
		if outs[i], err = os.ReadFile(dst); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two compressions of one page differ")
	}
	zr, err := gzip.NewReader(bytes.NewReader(outs[0]))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(src)
	if zr.Name != "" || !zr.ModTime.IsZero() || !bytes.Equal(plain, want) {
		t.Fatalf("header name %q mtime %v, content equal %v", zr.Name, zr.ModTime, bytes.Equal(plain, want))
	}
}
