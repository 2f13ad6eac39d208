package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"ilnp/lab/scalesess"
)

// cmdScale is `ilnp-lab scale` (issue 28): a CN with N sessions, a mass move, the MN's fan-out
// to M correspondents and a restart at scale, with real ILNP packets.
func cmdScale(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	var c common
	c.registerOutBin(fs)
	sessions := fs.Int("sessions", 100_000, "sessions the CN holds (each its own correspondent and nonce)")
	luRate := fs.Int("lu-rate", 10_000, "Locator Updates per second in the mass move at the CN, from distinct sessions")
	luDuration := fs.Duration("lu-duration", 10*time.Second, "how long the mass move lasts")
	corr := fs.Int("correspondents", 1000, "the MN's correspondents in the fan-out of one move")
	openRate := fs.Int("open-rate", 5000, "sessions opened per second while setting up")
	profile := fs.String("profile", "", "directory where the daemons serve Go profiles and the run saves the CN's CPU profile of the mass move, its heap and the MN's CPU profile of the fan-out (a short path: it holds Unix sockets)")
	memLimit := fs.String("memory-limit", "", "the CN's ilnpd.conf memory-limit (e.g. 64M; default: none), as ilnpd.conf(5) SIZING has a user set it")
	ringSize := fs.String("event-ring-size", "", "the CN's ilnpd.conf event-ring-size (e.g. 4M; default: the datapath's 256K)")
	_ = fs.Parse(args)
	bin, err := c.ilnpBinaries("scale")
	if err != nil {
		return err
	}
	r, err := scalesess.Run(ctx, scalesess.Config{Out: c.out, BinDir: bin, Sessions: *sessions, LURate: *luRate,
		LUDuration: *luDuration, Correspondents: *corr, OpenRate: *openRate, ProfileDir: *profile, MemoryLimit: *memLimit,
		EventRingSize: *ringSize, Log: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Printf("%d sessions: %d/%d LUs acknowledged (p50 %.2f ms, p99 %.2f ms), bystander lost %d, fan-out to %d in %.1f ms, adopt %.0f ms; %s, %s\n",
		r.Sessions, r.LUsAcked, r.LUsSent, r.LUAckP50Ms, r.LUAckP99Ms, r.BystanderLost, r.FanoutCorrespondents, r.FanoutMs, r.AdoptMs,
		filepath.Join(c.out, "scale.json"), filepath.Join(c.out, "scale.md"))
	return nil
}
