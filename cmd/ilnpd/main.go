// Command ilnpd is the ILNPv6 node daemon: it discovers this host's locators from Router
// Advertisements, keeps the ILNP Communication Cache, tells correspondents about moves with
// Locator Updates, runs a stub resolver for ILNP names and programs the BPF datapath.
//
//	ilnpd [-config /etc/ilnp/ilnpd.conf]
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
	"syscall"

	"ilnp/internal/config"
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
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))

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
	err = n.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("ilnpd stopped", "err", err)
	return err
}
