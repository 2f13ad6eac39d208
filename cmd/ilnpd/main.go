// Command ilnpd is the ILNPv6 node daemon: it discovers this host's locators from Router
// Advertisements, keeps the ILNP Communication Cache, tells correspondents about moves with
// Locator Updates, runs a stub resolver for ILNP names and programs the BPF datapath.
//
//	ilnpd [-config /etc/ilnp/ilnpd.conf] [-check | -flush] [-pprof SOCKET]
//
// SIGTERM, SIGINT (and SIGKILL, a crash) leave the datapath running: pinned maps and TCX
// links, addresses and routes stay, packets keep flowing, and the next ilnpd with the same
// configuration adopts the sessions. -flush removes everything an ilnpd with this
// configuration left (asking a running one to do it and exit) and exits 0.
//
// SIGHUP reads the configuration again and applies what can change while running (handoff,
// policy, LU timers, idle timeout, new-session bound, log level, the hosts file's contents);
// a bad file or a change that needs a restart is logged and changes nothing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/control"
	"ilnp/internal/node"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ilnpd:", err)
		os.Exit(1)
	}
}

func run() error {
	configPath := flag.String("config", "/etc/ilnp/ilnpd.conf", "configuration file")
	check := flag.Bool("check", false, "check the configuration and exit")
	flush := flag.Bool("flush", false, "remove everything ilnpd left (datapath, pins, routes, addresses, state) and exit")
	pprofSock := flag.String("pprof", "", "serve Go's runtime profiles (net/http/pprof) on this Unix socket (for profiling; off by default)")
	flag.Parse()
	if flag.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}

	cfg, err := config.Load(*configPath)
	if err != nil {
		return err
	}
	if *check {
		fmt.Println("configuration ok")
		return nil
	}
	if *flush {
		return flushAll(cfg)
	}
	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	runtimeMemory(cfg, log)

	var events io.Writer // a nil *os.File in an io.Writer would not be nil
	if cfg.EventsFile != "" {
		f, err := os.OpenFile(cfg.EventsFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("events file: %w", err)
		}
		defer f.Close()
		events = f
	}

	n, err := node.New(cfg, log, events)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *pprofSock != "" {
		closeProfiles, err := serveProfiles(*pprofSock, log)
		if err != nil {
			return err
		}
		defer closeProfiles()
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload(ctx, *configPath, n, level, log)
			}
		}
	}()
	err = n.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("ilnpd stopped", "err", err)
	return err
}

// runtimeMemory applies memory-limit and gc-percent to the Go runtime (issue 28): without a
// limit the heap grows to twice what is live before a collection (GOGC 100), and the resident
// memory of a daemon with a million sessions follows that.
func runtimeMemory(cfg config.Config, log *slog.Logger) {
	if cfg.GCPercent != 0 {
		debug.SetGCPercent(cfg.GCPercent)
	}
	if cfg.MemoryLimit != 0 {
		debug.SetMemoryLimit(cfg.MemoryLimit)
	}
	if cfg.GCPercent != 0 || cfg.MemoryLimit != 0 {
		log.Info("go runtime memory", "memory_limit", cfg.MemoryLimit, "gc_percent", cfg.GCPercent)
	}
}

// reload re-reads the configuration file; errors (with the file's line) are logged and the
// running configuration stays.
func reload(ctx context.Context, path string, n *node.Node, level *slog.LevelVar, log *slog.Logger) {
	cfg, err := config.Load(path)
	if err != nil {
		log.Error("reload refused", "err", err)
		return
	}
	if _, err := n.Reload(ctx, cfg); err != nil {
		log.Error("reload refused", "err", err)
		return
	}
	level.Set(cfg.LogLevel)
}

// flushAll is -flush: a running ilnpd is asked to flush and exit (as `ilnpctl flush`);
// otherwise what the last one left is removed here.
func flushAll(cfg config.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := control.Client{Socket: cfg.ControlSocket()}.Flush(ctx, 20*time.Second)
	if err == nil {
		fmt.Println("flushed (the running ilnpd removed everything and exited)")
		return nil
	}
	if !errors.Is(err, control.ErrNotRunning) {
		return fmt.Errorf("flush: %w", err)
	}
	if err := node.FlushStopped(cfg); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	fmt.Println("flushed")
	return nil
}
