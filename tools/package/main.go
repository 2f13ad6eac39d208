// Command package builds the ilnp Debian package with nfpm (used as a library):
// OUT/ilnp_VERSION_ARCH.deb from dist/nfpm.yaml, the binaries it builds (static, CGO_ENABLED=0)
// and the man pages in dist/man. Older ilnp_*.deb files in OUT are removed.
//
//	go run ./tools/package [-out out] [-version VERSION] [-arch GOARCH]
//
// The version defaults to one derived from `git describe`: a tag v1.2.3 gives 1.2.3, four
// commits after it 1.2.3+4.gSHA, no tag 0.0.0+COUNT.gSHA (COUNT: commits up to HEAD, so later
// builds sort later); a tree with uncommitted changes adds ".dirty".
package main

import (
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
)

func main() {
	out := flag.String("out", "out", "directory for the package")
	version := flag.String("version", "", "Debian version (default: from git describe)")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH to build for")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "package: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	path, err := build(ctx, options{OutDir: *out, Version: *version, GOARCH: *arch})
	if err != nil {
		fmt.Fprintln(os.Stderr, "package:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

type options struct {
	Root    string // repository root; empty: found with git from the working directory
	OutDir  string // relative paths are relative to the working directory
	Version string // Debian version; empty: gitVersion
	GOARCH  string
}

// build writes the package and returns its path.
func build(ctx context.Context, opt options) (string, error) {
	var err error
	if opt.Root == "" {
		if opt.Root, err = git(ctx, "", "rev-parse", "--show-toplevel"); err != nil {
			return "", err
		}
	}
	if opt.GOARCH == "" {
		opt.GOARCH = runtime.GOARCH
	}
	if opt.Version == "" {
		if opt.Version, err = gitVersion(ctx, opt.Root); err != nil {
			return "", err
		}
	}
	if !debVersionRE.MatchString(opt.Version) {
		return "", fmt.Errorf("version %q is not a Debian version without revision", opt.Version)
	}
	mtime, err := sourceTime(ctx, opt.Root)
	if err != nil {
		return "", err
	}

	tmp, err := os.MkdirTemp("", "ilnp-package-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := buildBinaries(ctx, opt.Root, tmp, opt.GOARCH); err != nil {
		return "", err
	}
	pages, err := filepath.Glob(filepath.Join(opt.Root, "dist", "man", "*.[1-8]"))
	if err != nil {
		return "", err
	}
	for _, p := range pages {
		if err := gzipFile(p, filepath.Join(tmp, filepath.Base(p)+".gz")); err != nil {
			return "", err
		}
	}

	vars := map[string]string{"VERSION": opt.Version, "ARCH": opt.GOARCH, "BUILD": tmp}
	cfg, err := nfpm.ParseFileWithEnvMapping(filepath.Join(opt.Root, "dist", "nfpm.yaml"),
		func(k string) string { return vars[k] })
	if err != nil {
		return "", fmt.Errorf("dist/nfpm.yaml: %w", err)
	}
	info, err := cfg.Get("deb")
	if err != nil {
		return "", fmt.Errorf("dist/nfpm.yaml: %w", err)
	}
	info = nfpm.WithDefaults(info)
	info.MTime = mtime
	// Paths in the file are relative to the repository, not to the working directory.
	rel := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(opt.Root, *p)
		}
	}
	for _, c := range info.Contents {
		rel(&c.Source)
	}
	for _, s := range []*string{&info.Scripts.PreInstall, &info.Scripts.PostInstall,
		&info.Scripts.PreRemove, &info.Scripts.PostRemove} {
		rel(s)
	}
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", fmt.Errorf("dist/nfpm.yaml: %w", err)
	}
	packager, err := nfpm.Get("deb")
	if err != nil {
		return "", err
	}

	if err := os.MkdirAll(opt.OutDir, 0o755); err != nil {
		return "", err
	}
	target := filepath.Join(opt.OutDir, packager.ConventionalFileName(info))
	f, err := os.CreateTemp(opt.OutDir, ".ilnp-*.deb")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name()) // after the rename: nothing
	info.Target = target
	if err := packager.Package(info, f); err != nil {
		f.Close()
		return "", fmt.Errorf("nfpm: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(f.Name(), target); err != nil {
		return "", err
	}
	// Older builds go, so `apt install ./out/ilnp_*.deb` names one package.
	old, err := filepath.Glob(filepath.Join(opt.OutDir, info.Name+"_*_*.deb"))
	if err != nil {
		return "", err
	}
	for _, p := range old {
		if p != target {
			if err := os.Remove(p); err != nil {
				return "", fmt.Errorf("remove an older package: %w", err)
			}
		}
	}
	return target, nil
}

// buildBinaries builds ilnpd and ilnpctl into dir: static (no libc dependency), stripped,
// without local paths, for linux/goarch.
func buildBinaries(ctx context.Context, root, dir, goarch string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("building the binaries needs the go command: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s -w -buildid=",
		"-o", dir+string(filepath.Separator), "./cmd/ilnpd", "./cmd/ilnpctl")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build (run `make generate` first for the BPF objects): %w\n%s", err, out)
	}
	return nil
}

// gzipFile compresses a man page the way Debian wants it: maximum compression, no name and no
// time stamp in the header (reproducible).
func gzipFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		f.Close()
		return err
	}
	if _, err := zw.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("gzip %s: %w", src, err)
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("gzip %s: %w", src, err)
	}
	return f.Close()
}

// sourceTime is the time stamp of every file in the package: SOURCE_DATE_EPOCH when set,
// otherwise the commit time of HEAD, so the same commit gives the same package.
func sourceTime(ctx context.Context, root string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		var err error
		if s, err = git(ctx, root, "log", "-1", "--format=%ct"); err != nil {
			return time.Time{}, err
		}
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("source time %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// gitVersion derives the package version from the repository (see debVersion).
func gitVersion(ctx context.Context, root string) (string, error) {
	sha, err := git(ctx, root, "rev-parse", "--short=7", "HEAD")
	if err != nil {
		return "", err
	}
	count, err := git(ctx, root, "rev-list", "--count", "HEAD")
	if err != nil {
		return "", err
	}
	status, err := git(ctx, root, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", err
	}
	// No matching tag is not an error: describe is empty and the fallback applies.
	describe, _ := git(ctx, root, "describe", "--tags", "--match", "v[0-9]*", "--long")
	return debVersion(describe, count, sha, status != "")
}

var (
	describeRE   = regexp.MustCompile(`^v([0-9][A-Za-z0-9.+~-]*)-([0-9]+)-g([0-9a-f]+)$`)
	debVersionRE = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`)
)

// debVersion turns `git describe --long` output into a Debian version: v1.2.3-0-gSHA is
// 1.2.3, v1.2.3-4-gSHA 1.2.3+4.gSHA (after 1.2.3), a pre-release tag v1.2.3-rc1 1.2.3~rc1
// (before 1.2.3). Without a tag (describe empty) it is 0.0.0+COUNT.gSHA. dirty appends
// ".dirty" to the part after '+'.
func debVersion(describe, count, sha string, dirty bool) (string, error) {
	var base, meta string
	if describe == "" {
		if _, err := strconv.ParseUint(count, 10, 32); err != nil {
			return "", fmt.Errorf("commit count %q: %w", count, err)
		}
		if !regexp.MustCompile(`^[0-9a-f]{4,40}$`).MatchString(sha) {
			return "", fmt.Errorf("commit %q is not a hex abbreviation", sha)
		}
		base, meta = "0.0.0", count+".g"+sha
	} else {
		m := describeRE.FindStringSubmatch(describe)
		if m == nil {
			return "", fmt.Errorf("git describe %q: want vVERSION-N-gSHA", describe)
		}
		base = strings.ReplaceAll(m[1], "-", "~")
		if m[2] != "0" {
			meta = m[2] + ".g" + m[3]
		}
	}
	if dirty {
		meta = strings.TrimPrefix(meta+".dirty", ".")
	}
	v := base
	if meta != "" {
		if strings.Contains(base, "+") {
			v += "." + meta
		} else {
			v += "+" + meta
		}
	}
	if !debVersionRE.MatchString(v) {
		return "", fmt.Errorf("git describe %q gives %q, not a Debian version", describe, v)
	}
	return v, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
